"""Why a script called an API the virtual GPUs do not emulate, where Maya knows: notes `maya emulate` prints."""

from __future__ import annotations

from collections.abc import Iterable

PEER_MEMORY_PREFIXES = ("cuMulticast", "cuMemExportToShareableHandle", "cuMemImportFromShareableHandle", "cudaIpc")
"""Memory shared between processes: CUDA IPC handles, shareable allocation handles, switch multicast objects."""

PEER_MEMORY_NOTE = (
    "{apis}: memory shared with other processes' GPUs (CUDA IPC, shareable handles, switch multicast), which "
    "Transformer Engine's userbuffers map for tensor-parallel communication/GEMM overlap (Megatron-LM's "
    "--tp-comm-overlap, TE's initialize_ub). A virtual GPU shares no memory with its peers, so this is not "
    "emulated: run without --tp-comm-overlap (its collectives are then NCCL's, and priced)."
)


def notes(unimplemented: Iterable[str]) -> list[str]:
    """A note for each group of unimplemented APIs whose purpose Maya knows (none for the others)."""
    peer = sorted({api for api in unimplemented if api.startswith(PEER_MEMORY_PREFIXES)})
    return [PEER_MEMORY_NOTE.format(apis=", ".join(peer))] if peer else []
