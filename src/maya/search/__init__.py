"""`maya search`: find the best training configuration in a space of script parameters by emulating and
predicting candidate points, with Maya's pruning rules, caching and a resumable log in the warehouse."""

from .algorithms import ALGORITHMS, CMAES, Grid, Random
from .evaluate import UNRESOLVED, Evaluator, MayaEvaluator, Salts, Task, evaluator_salts, script_digest, trace_digest
from .executors import LocalExecutor, RayExecutor
from .expr import Expr, ExprError
from .log import SearchLog, UnknownSearch
from .objective import OBJECTIVES
from .outcome import Outcome
from .pareto import pareto_front, write_pareto_html
from .rules import Rules
from .runner import Record, SearchResult, run_search, search_id
from .space import Parameter, Space, SpaceError, load_space

__all__ = [
    "ALGORITHMS",
    "UNRESOLVED",
    "CMAES",
    "Evaluator",
    "Expr",
    "ExprError",
    "Grid",
    "LocalExecutor",
    "MayaEvaluator",
    "OBJECTIVES",
    "Outcome",
    "Parameter",
    "Random",
    "RayExecutor",
    "Record",
    "Rules",
    "SearchLog",
    "Salts",
    "SearchResult",
    "Space",
    "SpaceError",
    "Task",
    "UnknownSearch",
    "evaluator_salts",
    "script_digest",
    "load_space",
    "pareto_front",
    "run_search",
    "search_id",
    "trace_digest",
    "write_pareto_html",
]
