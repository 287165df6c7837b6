"""The dralens / Claims dashboard (grafana/claims.json). See grafana/README.md."""
from generate import dashboard, row, self_monitoring, stat, table, timeseries

DASHBOARD = dashboard(
    uid="dralens-claims",
    title="dralens / Claims",
    description=("ResourceClaims through their lifecycle: what pends, for how long and why, "
                 "how long allocation takes, and transitions by state. Fed by the dralens "
                 "cluster role."),
    tags=["claims"],
    variable_metric="dralens_cluster_leader",
    rows=[
        row("Pending", [
            stat("Pending claims",
                "ResourceClaims not yet allocated (dralens_cluster_pending_claims).",
                "sum(dralens_cluster_pending_claims{S})"),
            stat("Oldest pending claim",
                "Age of the oldest pending claim, any reason "
                "(dralens_cluster_pending_claim_age_seconds).",
                "max(dralens_cluster_pending_claim_age_seconds{S})",
                unit="s"),
            stat("Pending for capacity",
                "Claims that pend because every device that could satisfy them is taken "
                "(reason no_capacity).",
                'sum(dralens_cluster_pending_claims{S, reason="no_capacity"})'),
            stat("Unsatisfiable",
                "Claims that no published device can satisfy even when free (reason "
                "unsatisfiable).",
                'sum(dralens_cluster_pending_claims{S, reason="unsatisfiable"})'),
            stat("Allocation latency p99",
                "99th percentile of the time from a claim's creation to its allocation over "
                "the dashboard's time range (dralens_cluster_allocation_latency_seconds).",
                "histogram_quantile(0.99, sum by (le) "
                "(increase(dralens_cluster_allocation_latency_seconds_bucket{S}[$__range])))",
                unit="s"),
            stat("Claims in use",
                "Claims whose reserving pod is running (dralens_cluster_claims, state in_use).",
                'sum(dralens_cluster_claims{S, state="in_use"})'),
            table("Pending claims",
                "Every pending claim with its DeviceClass, how long it has pended and why "
                "(dralens_cluster_pending_claim_age_seconds), oldest first.",
                "max by (namespace, claim, device_class, reason) "
                "(dralens_cluster_pending_claim_age_seconds{S})",
                "Age",
                columns={"namespace": "Namespace", "claim": "Claim", "device_class": "Class", "reason": "Reason"},
                unit="s",
                w=14),
            timeseries("Pending claims by reason",
                "Pending claims per reason: waiting_for_pod, no_capacity, unsatisfiable, "
                "tainted, unknown (dralens_cluster_pending_claims).",
                [("sum by (reason) (dralens_cluster_pending_claims{S})",
                  "{{reason}}")],
                stack=True,
                w=10),
        ]),
        row("Allocation", [
            timeseries("Allocation latency by class",
                "Median and 99th percentile of the time from a claim's creation to its "
                "allocation, per DeviceClass (dralens_cluster_allocation_latency_seconds).",
                [("histogram_quantile(0.99, sum by (device_class, le) "
                  "(rate(dralens_cluster_allocation_latency_seconds_bucket{S}[$__rate_interval])))",
                  "p99 {{device_class}}"),
                 ("histogram_quantile(0.5, sum by (device_class, le) "
                  "(rate(dralens_cluster_allocation_latency_seconds_bucket{S}[$__rate_interval])))",
                  "p50 {{device_class}}")],
                unit="s"),
            timeseries("Allocations per second",
                "Claims allocated per second, per DeviceClass (count of "
                "dralens_cluster_allocation_latency_seconds).",
                [("sum by (device_class) "
                  "(rate(dralens_cluster_allocation_latency_seconds_count{S}[$__rate_interval]))",
                  "{{device_class}}")],
                unit="ops"),
            timeseries("Multi-device claims by spread and NVLink",
                "Allocated claims with two or more devices, by where their devices landed: "
                "same_pcie_root, same_numa, cross_numa, cross_node, and whether they share an "
                "NVLink domain: connected, not_connected (dralens_cluster_claim_topology). "
                "DralensClaimTopologyPoor fires for claims of topology-sensitive classes that land "
                "cross_numa or cross_node and are not NVLink-connected.",
                [("sum by (device_class, spread, nvlink) (dralens_cluster_claim_topology{S})",
                  "{{device_class}} {{spread}} {{nvlink}}")],
                stack=True),
        ]),
        row("Lifecycle", [
            timeseries("Claims by state",
                "ResourceClaims by lifecycle state: pending, allocated, reserved, in_use "
                "(dralens_cluster_claims).",
                [("sum by (state) (dralens_cluster_claims{S})",
                  "{{state}}")],
                stack=True),
            timeseries("Lifecycle transitions",
                "Claim transitions per second: created, allocated, reserved, in_use, released, "
                "deleted (dralens_cluster_claim_transitions_total). Each is an event on the "
                "claim's lifecycle trace.",
                [("sum by (to) "
                  "(rate(dralens_cluster_claim_transitions_total{S}[$__rate_interval]))",
                  "{{to}}")],
                unit="ops"),
            table("Claims by namespace, class and state",
                "ResourceClaims now per namespace, DeviceClass and state "
                "(dralens_cluster_claims).",
                "sum by (namespace, device_class, state) (dralens_cluster_claims{S})",
                "Claims",
                columns={"namespace": "Namespace", "device_class": "Class", "state": "State"},
                w=24),
        ]),
        self_monitoring(),
    ],
)
