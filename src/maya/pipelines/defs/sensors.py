"""New or grown campaign directories (`<profiles>/<hardware>/<campaign>/`, e.g. dropped by `maya profile
kernels` or the profiling_campaign job) and NeuSight's GPUs become raw-profile partitions, ingested."""
import json

import dagster as dg

from ..partitions import campaign_partitions, hardware_partitions, partition_key
from ..resources import DataSources
from ..sources import find_partitions, fingerprint, partition_files

ingest_profiles = dg.define_asset_job("ingest_profiles", selection=["raw_kernel_profiles", "validated_kernel_profiles"],
                                      description="Raw kernel profiles of one partition into the warehouse.")


@dg.sensor(job=ingest_profiles, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def profile_campaigns(context: dg.SensorEvaluationContext, data: DataSources) -> dg.SensorResult:
    """Registers the partitions of new campaign directories and requests an ingestion of every partition
    whose files changed (the cursor keeps each partition's file fingerprint)."""
    seen = json.loads(context.cursor) if context.cursor else {}
    found = {str(partition_key(p)): (p, fingerprint(partition_files(data, p))) for p in find_partitions(data)}
    dimensions = {"hardware": hardware_partitions, "campaign": campaign_partitions}
    known = {name: set(context.instance.get_dynamic_partitions(name)) for name in dimensions}
    new = {name: sorted({getattr(p, name) for p, _ in found.values()} - known[name]) for name in dimensions}
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=key, run_key=f"{key}:{files}")
                      for key, (_, files) in found.items() if seen.get(key) != files],
        dynamic_partitions_requests=[dimensions[name].build_add_request(keys) for name, keys in new.items() if keys],
        cursor=json.dumps({key: files for key, (_, files) in found.items()}, sort_keys=True))
