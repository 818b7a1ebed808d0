"""New or grown campaign directories (`<profiles>/<hardware>/<campaign>/`, e.g. dropped by `maya profile
kernels` or the profiling_campaign job), NeuSight's and Vidur's GPUs and Vidur's networks become raw-data
partitions, ingested; so are the shipped public kernel measurements, one static partition per file, whenever
a file changed."""

import json

import dagster as dg

from ..partitions import (
    campaign_partitions,
    hardware_partitions,
    network_partition_key,
    network_partitions,
    partition_key,
)
from ..resources import DataSources
from ..sources import (
    PUBLIC_KERNEL_SOURCES,
    find_network_partitions,
    find_partitions,
    fingerprint,
    network_files,
    partition_files,
    public_kernel_files,
)

ingest_profiles = dg.define_asset_job(
    "ingest_profiles",
    selection=["raw_kernel_profiles", "validated_kernel_profiles"],
    description="Raw kernel profiles of one partition into the warehouse.",
)
ingest_collectives = dg.define_asset_job(
    "ingest_collectives",
    selection=["raw_collective_measurements", "validated_collective_measurements"],
    description="Raw collective measurements of one (network, campaign) partition into the warehouse.",
)

ingest_public_kernels = dg.define_asset_job(
    "ingest_public_kernels",
    selection=["raw_public_kernels", "validated_public_kernels"],
    description="One shipped file of public kernel measurements into the warehouse.",
)


@dg.sensor(
    jobs=[ingest_profiles, ingest_collectives, ingest_public_kernels],
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def profile_campaigns(context: dg.SensorEvaluationContext, data: DataSources) -> dg.SensorResult:
    """Registers the partitions of new campaign directories and shipped sources and requests an ingestion of
    every partition whose files changed (the cursor keeps each partition's file fingerprint)."""
    seen = json.loads(context.cursor) if context.cursor else {}
    found = {
        str(partition_key(p)): (p, fingerprint(partition_files(data, p)), ingest_profiles.name)
        for p in find_partitions(data)
    }
    found.update(
        {
            f"network:{network_partition_key(p)}": (p, fingerprint(network_files(data, p)), ingest_collectives.name)
            for p in find_network_partitions(data)
        }
    )
    found.update(
        {
            f"public:{source}": (source, fingerprint(public_kernel_files(source)), ingest_public_kernels.name)
            for source in PUBLIC_KERNEL_SOURCES
        }
    )
    dimensions = {"hardware": hardware_partitions, "campaign": campaign_partitions, "network": network_partitions}
    wanted = {name: {getattr(p, name) for p, _, _ in found.values() if hasattr(p, name)} for name in dimensions}
    known = {name: set(context.instance.get_dynamic_partitions(name)) for name in dimensions}
    new = {name: sorted(wanted[name] - known[name]) for name in dimensions}
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                partition_key=key.removeprefix("network:").removeprefix("public:"),
                run_key=f"{key}:{files}",
                job_name=job,
            )
            for key, (_, files, job) in found.items()
            if seen.get(key) != files
        ],
        dynamic_partitions_requests=[dimensions[name].build_add_request(keys) for name, keys in new.items() if keys],
        cursor=json.dumps({key: files for key, (_, files, _) in found.items()}, sort_keys=True),
    )
