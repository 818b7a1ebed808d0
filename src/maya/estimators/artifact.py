"""A trained `KernelEstimator` as one file: a zip of `manifest.json` (format, per-family-segment feature
names, hardware, architectures, launch floors, the kernels measured, the shortest device time the measurements resolve (absent in
older artifacts: the post-launch time), bands and the seen model's band on unmeasured GPUs (absent in older
artifacts)), one XGBoost model per family segment
(`segments.model_key`: `gemm@tensor`, `copy`, ...) and kind (`<key>.seen.ubj`, `<key>.transfer.ubj`, XGBoost's
binary JSON), the measured-shape table (`lookup.parquet`) and the version's GEMM references with what they answer for
(`gemm_references`: `gemm_reference.GemmReferences`; an artifact without them has v1's if it is v1's, else none,
`gemm_reference.legacy`). An artifact of one model per family (before segments) loads as it is: each family's model
prices all its segments.
Entries carry a fixed timestamp, so equal estimators give equal bytes."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile

from .efficiency_model import Band, EfficiencyModel
from .gemm_reference import GemmReferences, legacy
from .kernel_estimator import FamilyModels, KernelEstimator
from .launch_floor import POST_LAUNCH_S, LaunchFloors
from .lookup import MeasuredShapes

FORMAT = "maya-kernel-estimator/3"
_EPOCH = (1980, 1, 1, 0, 0, 0)


class ArtifactFormatError(ValueError):
    """The bytes are not a readable estimator artifact."""


def dumps(estimator: KernelEstimator) -> bytes:
    manifest = {
        "format": FORMAT,
        "families": {},
        "roofline_bands": {family: [band.low, band.high] for family, band in sorted(estimator.roofline_bands.items())},
        "gemm_references": estimator.gemm_references.to_json(),
    }
    files: dict[str, bytes] = {}
    for family, models in sorted(estimator.models.items()):
        entry = {
            "hardware": sorted(models.hardware),
            "architectures": sorted(models.architectures),
            "floors": models.floors.to_json(),
            "kernels": sorted(models.kernels),
            "resolves_from_s": models.resolves_from_s,
        }
        if models.unseen_gpu_band is not None:
            entry["unseen_gpu_band"] = [models.unseen_gpu_band.low, models.unseen_gpu_band.high]
        for kind, model in (("seen", models.seen), ("transfer", models.transfer)):
            entry[kind] = {"features": list(model.feature_names), "band": [model.band.low, model.band.high]}
            files[f"{family}.{kind}.ubj"] = model.to_bytes()
        manifest["families"][family] = entry
    if estimator.lookup is not None:
        files["lookup.parquet"] = estimator.lookup.to_bytes()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in [("manifest.json", json.dumps(manifest, sort_keys=True).encode()), *files.items()]:
            archive.writestr(zipfile.ZipInfo(name, _EPOCH), data, zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


def loads(raw: bytes) -> KernelEstimator:
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            manifest = _manifest(archive)
            models = {family: _family_models(archive, family, entry) for family, entry in manifest["families"].items()}
            names = set(archive.namelist())
            lookup = MeasuredShapes.from_bytes(archive.read("lookup.parquet")) if "lookup.parquet" in names else None
            references = _gemm_references(manifest, raw)
    except ArtifactFormatError:
        raise
    except Exception as e:  # zip, JSON, XGBoost and Parquet each fail their own way on damaged bytes
        raise ArtifactFormatError(f"{type(e).__name__}: {e}") from e
    bands = {family: Band(*values) for family, values in manifest["roofline_bands"].items()}
    return KernelEstimator(models=models, lookup=lookup, roofline_bands=bands, gemm_references=references)


def gemm_references(raw: bytes) -> GemmReferences:
    """The GEMM references of an artifact, read from its manifest alone (no model is parsed)."""
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            return _gemm_references(_manifest(archive), raw)
    except ArtifactFormatError:
        raise
    except Exception as e:
        raise ArtifactFormatError(f"{type(e).__name__}: {e}") from e


def _manifest(archive: zipfile.ZipFile) -> dict:
    manifest = json.loads(archive.read("manifest.json"))
    if manifest.get("format") != FORMAT:
        raise ArtifactFormatError(
            f"format {manifest.get('format')!r}, expected {FORMAT!r} (trained by another "
            "Maya version: `maya estimators train` builds a current one)"
        )
    return manifest


def _gemm_references(manifest: dict, raw: bytes) -> GemmReferences:
    """The manifest's references, else those of an artifact from before they were stored (`gemm_reference.legacy`)."""
    if "gemm_references" in manifest:
        return GemmReferences.from_json(manifest["gemm_references"])
    return legacy(hashlib.sha256(raw).hexdigest())


def _family_models(archive: zipfile.ZipFile, family: str, entry: dict) -> FamilyModels:
    def model(kind: str) -> EfficiencyModel:
        spec = entry[kind]
        return EfficiencyModel.from_bytes(
            archive.read(f"{family}.{kind}.ubj"), tuple(spec["features"]), Band(*spec["band"])
        )

    return FamilyModels(
        seen=model("seen"),
        transfer=model("transfer"),
        hardware=frozenset(entry["hardware"]),
        architectures=frozenset(entry["architectures"]),
        floors=LaunchFloors.from_json(entry["floors"]),
        kernels=frozenset(entry.get("kernels", ())),
        resolves_from_s=entry.get("resolves_from_s", POST_LAUNCH_S),
        unseen_gpu_band=Band(*entry["unseen_gpu_band"]) if "unseen_gpu_band" in entry else None,
    )
