"""Raw kernel profiles are partitioned by hardware and campaign, both dynamic: the sensor adds the
keys of every campaign directory it finds (and NeuSight's GPUs)."""
from __future__ import annotations

import dagster as dg

from .sources import Partition

hardware_partitions = dg.DynamicPartitionsDefinition(name="hardware")
campaign_partitions = dg.DynamicPartitionsDefinition(name="campaign")
profile_partitions = dg.MultiPartitionsDefinition({"hardware": hardware_partitions, "campaign": campaign_partitions})


def partition_key(partition: Partition) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"hardware": partition.hardware, "campaign": partition.campaign})


def partition_of(context: dg.AssetExecutionContext) -> Partition:
    keys = context.partition_key.keys_by_dimension
    return Partition(keys["hardware"], keys["campaign"])
