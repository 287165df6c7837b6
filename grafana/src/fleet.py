"""The dralens / Fleet dashboard (grafana/fleet.json). See grafana/README.md."""
from generate import bargauge, dashboard, row, self_monitoring, stat, table, timeseries

DASHBOARD = dashboard(
    uid="dralens-fleet",
    title="dralens / Fleet",
    description=("GPU capacity across the cluster in physical GPUs: free, allocated, "
                 "unavailable, pending claims and stranded GPUs with their cost, by node, "
                 "product and DeviceClass. Fed by the dralens cluster role."),
    tags=["fleet"],
    variable_metric="dralens_cluster_leader",
    rows=[
        row("Capacity", [
            stat("GPUs",
                "Physical GPUs across the cluster, each counted once whatever it is published "
                "as (full device, MIG instances, partitionable, shares) and whatever classes "
                "it matches (dralens_cluster_gpus).",
                "sum(dralens_cluster_gpus{S})"),
            stat("Allocated GPUs",
                "GPU-equivalents held by claims; a MIG instance or share counts as its fraction "
                "of its GPU (dralens_cluster_gpus, state allocated).",
                'sum(dralens_cluster_gpus{S, state="allocated"})',
                decimals=2),
            stat("Free GPUs",
                "GPU-equivalents no claim holds on healthy, Ready nodes "
                "(dralens_cluster_gpus, state free).",
                'sum(dralens_cluster_gpus{S, state="free"})',
                decimals=2),
            stat("Unavailable GPUs",
                "GPU-equivalents tainted NoSchedule/NoExecute or on a NotReady or gone node "
                "(dralens_cluster_gpus, state unavailable).",
                'sum(dralens_cluster_gpus{S, state="unavailable"})',
                decimals=2),
            stat("Pending claims",
                "ResourceClaims not yet allocated, for any reason "
                "(dralens_cluster_pending_claims).",
                "sum(dralens_cluster_pending_claims{S})"),
            stat("Stranded GPUs",
                "GPU-equivalents stranded right now, all kinds together; each part of a GPU "
                "is under one kind (dralens_cluster_stranded_gpus).",
                "sum(dralens_cluster_stranded_gpus{S})",
                decimals=2),
            stat("Stranded cost in range",
                "Cost of stranded GPU-seconds over the dashboard's time range, at the "
                "configured price per GPU-hour, in the price's currency "
                "(dralens_cluster_stranded_cost_total).",
                "sum(increase(dralens_cluster_stranded_cost_total{S}[$__range]))",
                unit="none",
                decimals=2),
            timeseries("GPUs by product and state",
                "Physical GPUs per product and state: free, allocated or unavailable "
                "(dralens_cluster_gpus).",
                [("sum by (product, state) (dralens_cluster_gpus{S})",
                  "{{product}} {{state}}")],
                stack=True),
            table("GPUs by node",
                "Physical GPUs per node, product and state, now (dralens_cluster_gpus).",
                "sum by (node, product, state) (dralens_cluster_gpus{S})",
                "GPUs",
                columns={"node": "Node", "product": "Product", "state": "State"}),
        ]),
        row("Pending and stranded", [
            timeseries("Pending claims by class and reason",
                "Pending ResourceClaims per DeviceClass and reason: waiting_for_pod, "
                "no_capacity, unsatisfiable, tainted, unknown (dralens_cluster_pending_claims).",
                [("sum by (device_class, reason) (dralens_cluster_pending_claims{S})",
                  "{{device_class}} {{reason}}")]),
            timeseries("Stranded GPUs by kind and class",
                "GPU-equivalents stranded right now by kind (advertised_unhealthy, "
                "allocated_not_running, free_while_pending, unplaceable_fragment) and the "
                "DeviceClass they are attributed to (dralens_cluster_stranded_gpus).",
                [("sum by (kind, device_class) (dralens_cluster_stranded_gpus{S})",
                  "{{kind}} {{device_class}}")],
                stack=True),
            timeseries("Stranded GPUs by node",
                "GPU-equivalents stranded right now per node and kind "
                "(dralens_cluster_stranded_gpus).",
                [("sum by (node, kind) (dralens_cluster_stranded_gpus{S})",
                  "{{node}} {{kind}}")],
                stack=True),
            timeseries("Stranded cost per hour",
                "Cost per hour of stranded GPUs by kind and DeviceClass, in the configured "
                "price's currency (rate of dralens_cluster_stranded_cost_total times 3600).",
                [("sum by (kind, device_class) "
                  "(rate(dralens_cluster_stranded_cost_total{S}[$__rate_interval])) * 3600",
                  "{{kind}} {{device_class}}")],
                unit="none",
                stack=True),
            table("Stranded cost by node in range",
                "Cost of stranded GPU-seconds over the dashboard's time range per node, "
                "product, DeviceClass and kind (dralens_cluster_stranded_cost_total).",
                "sum by (node, product, device_class, kind) "
                "(increase(dralens_cluster_stranded_cost_total{S}[$__range]))",
                "Cost",
                columns={"node": "Node", "product": "Product", "device_class": "Class",
                         "kind": "Kind"},
                unit="none"),
            table("Stranded GPU-hours by node in range",
                "GPU-hours spent stranded over the dashboard's time range per node, product, "
                "DeviceClass and kind (dralens_cluster_stranded_gpu_seconds_total).",
                "sum by (node, product, device_class, kind) "
                "(increase(dralens_cluster_stranded_gpu_seconds_total{S}[$__range])) / 3600",
                "GPU-hours",
                columns={"node": "Node", "product": "Product", "device_class": "Class",
                         "kind": "Kind"},
                unit="h"),
            bargauge("MIG instances placeable per profile",
                "How many more instances of each MIG profile still fit, summed over every GPU "
                "of the cluster, from the published shared counters "
                "(dralens_cluster_mig_placeable).",
                "sum by (profile) (dralens_cluster_mig_placeable{S})",
                "{{profile}}"),
            timeseries("Cluster role leader",
                "1 for the replica of the cluster role that holds the leader lease and exports "
                "the cluster series (dralens_cluster_leader).",
                [("max by (instance) (dralens_cluster_leader{S})",
                  "{{instance}}")]),
        ]),
        row("Cost by team", [
            timeseries("Cost per hour by namespace",
                "What the GPUs each namespace's claims hold cost per hour, at the configured "
                "price per GPU-hour, in GPU-equivalents (rate of dralens_cluster_cost_total "
                "times 3600).",
                [("sum by (namespace) "
                  "(rate(dralens_cluster_cost_total{S}[$__rate_interval])) * 3600",
                  "{{namespace}}")],
                unit="none",
                stack=True),
            timeseries("GPUs held by namespace and state",
                "GPU-equivalents held by each namespace's claims: in_use while a reserving pod "
                "runs, else allocated_not_running (rate of dralens_cluster_gpu_seconds_total).",
                [("sum by (namespace, state) "
                  "(rate(dralens_cluster_gpu_seconds_total{S}[$__rate_interval]))",
                  "{{namespace}} {{state}}")],
                stack=True),
            table("Cost by namespace and class in range",
                "Cost of the GPU-seconds held over the dashboard's time range per namespace, "
                "DeviceClass and state (dralens_cluster_cost_total).",
                "sum by (namespace, device_class, state) "
                "(increase(dralens_cluster_cost_total{S}[$__range]))",
                "Cost",
                columns={"namespace": "Namespace", "device_class": "Class", "state": "State"},
                unit="none"),
            table("GPU-hours by namespace and class in range",
                "GPU-hours held over the dashboard's time range per namespace, DeviceClass and "
                "state (dralens_cluster_gpu_seconds_total).",
                "sum by (namespace, device_class, state) "
                "(increase(dralens_cluster_gpu_seconds_total{S}[$__range])) / 3600",
                "GPU-hours",
                columns={"namespace": "Namespace", "device_class": "Class", "state": "State"},
                unit="h"),
        ]),
        self_monitoring(),
    ],
)
