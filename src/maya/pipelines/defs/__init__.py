"""Maya's Dagster definitions, one concern per module (loaded by `maya.pipelines.definitions`)."""
