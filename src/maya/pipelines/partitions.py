"""Raw kernel profiles are partitioned by hardware and campaign, collective measurements by network and
campaign, all dynamic: the sensor adds the keys of every campaign directory it finds (and NeuSight's and
Vidur's GPUs and networks)."""

from __future__ import annotations

import dagster as dg

from .sources import NetworkPartition, Partition

hardware_partitions = dg.DynamicPartitionsDefinition(name="hardware")
campaign_partitions = dg.DynamicPartitionsDefinition(name="campaign")
network_partitions = dg.DynamicPartitionsDefinition(name="network")
profile_partitions = dg.MultiPartitionsDefinition({"hardware": hardware_partitions, "campaign": campaign_partitions})
collective_partitions = dg.MultiPartitionsDefinition({"network": network_partitions, "campaign": campaign_partitions})


def partition_key(partition: Partition) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"hardware": partition.hardware, "campaign": partition.campaign})


def partition_of(context: dg.AssetExecutionContext) -> Partition:
    keys = context.partition_key.keys_by_dimension
    return Partition(keys["hardware"], keys["campaign"])


def network_partition_key(partition: NetworkPartition) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"network": partition.network, "campaign": partition.campaign})


def network_partition_of(context: dg.AssetExecutionContext) -> NetworkPartition:
    keys = context.partition_key.keys_by_dimension
    return NetworkPartition(keys["network"], keys["campaign"])
