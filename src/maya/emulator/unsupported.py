"""Why a script called an API the virtual GPUs do not emulate, where Maya knows: notes `maya emulate` prints."""

from __future__ import annotations

from collections.abc import Iterable

PEER_MEMORY_PREFIXES = ("cuMulticast", "cuMemExportToShareableHandle", "cuMemImportFromShareableHandle", "cudaIpc")
"""Memory shared between processes: CUDA IPC handles, shareable allocation handles, switch multicast objects."""

PEER_MEMORY_NOTE = (
    "{apis}: memory shared with other processes (CUDA IPC, shareable handles, switch multicast), as CUDA tensors "
    "passed between processes, symmetric memory or communication libraries map it. A virtual GPU shares no "
    "memory with other processes, so this is not emulated."
)

USERBUFFERS = ("initialize_ub", "create_communicator", "CommOverlap", "userbuffers")
"""Transformer Engine's userbuffers in a traceback: its set-up (`initialize_ub`), its communicators and their
classes (`create_communicator*`, `CommOverlap*`), its sources."""

USERBUFFERS_NOTE = (
    " Transformer Engine's userbuffers map it for tensor-parallel communication/GEMM overlap (Megatron-LM's "
    "--tp-comm-overlap, TE's initialize_ub): run without --tp-comm-overlap (its collectives are then NCCL's, "
    "and priced)."
)


def notes(unimplemented: Iterable[str], errors: Iterable[str] = ()) -> list[str]:
    """A note for each group of unimplemented APIs whose purpose Maya knows (none for the others); `errors`, the
    ranks' tracebacks, tell whose call it was."""
    peer = sorted({api for api in unimplemented if api.startswith(PEER_MEMORY_PREFIXES)})
    if not peer:
        return []
    note = PEER_MEMORY_NOTE.format(apis=", ".join(peer))
    if any(name in error for error in errors for name in USERBUFFERS):
        note += USERBUFFERS_NOTE
    return [note]
