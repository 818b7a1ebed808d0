"""Installing into Maya's own environment what some scripts need and `scripts/setup` leaves out (Transformer Engine),
on first need. Outside the predictor's sources (`maya.api.PREDICTOR_SOURCES`): editing an installer re-predicts
nothing."""
