"""`python -m maya.profiler kernels|workload ...` (see `commands`)."""

from .commands import main

raise SystemExit(main())
