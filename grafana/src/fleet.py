"""The dralens / Fleet dashboard (grafana/fleet.json). See grafana/README.md."""
from generate import bargauge, dashboard, row, self_monitoring, stat, table, timeseries

DASHBOARD = dashboard(
    uid="dralens-fleet",
    title="dralens / Fleet",
    description=("GPU capacity across the cluster: published, allocated, pending and stranded "
                 "devices with their cost, by node and DeviceClass. Fed by the dralens cluster "
                 "role."),
    tags=["fleet"],
    variable_metric="dralens_cluster_leader",
    rows=[
        row("Capacity", [
            stat("Published devices",
                "Devices published in ResourceSlices across the cluster "
                "(dralens_cluster_pool_devices). A device that matches several DeviceClasses "
                "counts once in each.",
                "sum(dralens_cluster_pool_devices{S})"),
            stat("Allocated",
                "Published devices allocated to a claim (state allocated). A device that "
                "matches several DeviceClasses counts once in each.",
                'sum(dralens_cluster_pool_devices{S, state="allocated"})'),
            stat("Free",
                "Published devices no claim holds (state free). A device that matches several "
                "DeviceClasses counts once in each.",
                'sum(dralens_cluster_pool_devices{S, state="free"})'),
            stat("Pending claims",
                "ResourceClaims not yet allocated, for any reason "
                "(dralens_cluster_pending_claims).",
                "sum(dralens_cluster_pending_claims{S})"),
            stat("Stranded devices",
                "Devices stranded right now, all kinds together "
                "(dralens_cluster_stranded_devices).",
                "sum(dralens_cluster_stranded_devices{S})"),
            stat("Stranded cost in range",
                "Cost of stranded device-seconds over the dashboard's time range, at the "
                "configured price per device-hour, in the price's currency "
                "(dralens_cluster_stranded_cost_total).",
                "sum(increase(dralens_cluster_stranded_cost_total{S}[$__range]))",
                unit="none",
                decimals=2),
            timeseries("Devices by class and state",
                "Published devices per DeviceClass and state: free, allocated or tainted "
                "(dralens_cluster_pool_devices).",
                [("sum by (device_class, state) (dralens_cluster_pool_devices{S})",
                  "{{device_class}} {{state}}")]),
            table("Devices by node",
                "Published devices per node, DeviceClass, product and state, now "
                "(dralens_cluster_pool_devices).",
                "sum by (node, device_class, product, state) (dralens_cluster_pool_devices{S})",
                "Devices",
                columns={"node": "Node", "device_class": "Class", "product": "Product", "state": "State"}),
        ]),
        row("Pending and stranded", [
            timeseries("Pending claims by class and reason",
                "Pending ResourceClaims per DeviceClass and reason: waiting_for_pod, "
                "no_capacity, unsatisfiable, tainted, unknown (dralens_cluster_pending_claims).",
                [("sum by (device_class, reason) (dralens_cluster_pending_claims{S})",
                  "{{device_class}} {{reason}}")]),
            timeseries("Stranded devices by kind and class",
                "Devices stranded right now by kind (allocated_not_running, "
                "free_while_pending, unplaceable_fragment, advertised_unhealthy) and "
                "DeviceClass (dralens_cluster_stranded_devices).",
                [("sum by (kind, device_class) (dralens_cluster_stranded_devices{S})",
                  "{{kind}} {{device_class}}")],
                stack=True),
            timeseries("Stranded devices by node",
                "Devices stranded right now per node and kind (dralens_cluster_stranded_devices).",
                [("sum by (node, kind) (dralens_cluster_stranded_devices{S})",
                  "{{node}} {{kind}}")],
                stack=True),
            timeseries("Stranded cost per hour",
                "Cost per hour of stranded capacity by kind and DeviceClass, in the configured "
                "price's currency (rate of dralens_cluster_stranded_cost_total times 3600).",
                [("sum by (kind, device_class) "
                  "(rate(dralens_cluster_stranded_cost_total{S}[$__rate_interval])) * 3600",
                  "{{kind}} {{device_class}}")],
                unit="none",
                stack=True),
            table("Stranded cost by node in range",
                "Cost of stranded device-seconds over the dashboard's time range per node, "
                "DeviceClass and kind (dralens_cluster_stranded_cost_total).",
                "sum by (node, device_class, kind) "
                "(increase(dralens_cluster_stranded_cost_total{S}[$__range]))",
                "Cost",
                columns={"node": "Node", "device_class": "Class", "kind": "Kind"},
                unit="none"),
            table("Stranded device-hours by node in range",
                "Device-hours spent stranded over the dashboard's time range per node, "
                "DeviceClass and kind (dralens_cluster_stranded_device_seconds_total).",
                "sum by (node, device_class, kind) "
                "(increase(dralens_cluster_stranded_device_seconds_total{S}[$__range])) / 3600",
                "Device-hours",
                columns={"node": "Node", "device_class": "Class", "kind": "Kind"},
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
        self_monitoring(),
    ],
)
