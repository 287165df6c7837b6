"""The dralens / Node dashboard (grafana/node.json). See grafana/README.md."""
from generate import (bargauge, dashboard, heatmap, row, self_monitoring, state_timeline, table,
                      timeseries)

DASHBOARD = dashboard(
    uid="dralens-node",
    title="dralens / Node",
    description=("One or more GPU nodes as their dralens node plugins see them: device states, "
                 "MIG layout and what still fits, claim preparation latency (with exemplars "
                 "into traces), errors and sharing decisions."),
    tags=["node"],
    variable_metric="dralens_node_in_flight",
    rows=[
        row("Devices", [
            state_timeline("Device state",
                "Each device's state over time: free, prepared (held by a prepared claim) or "
                "unhealthy (dralens_device_state).",
                'max by (instance, device) (dralens_device_state{S, state="free"} * 0 or '
                'dralens_device_state{S, state="prepared"} * 1 or '
                'dralens_device_state{S, state="unhealthy"} * 2)',
                "{{instance}} {{device}}",
                [(0, "free", "green"), (1, "prepared", "blue"), (2, "unhealthy", "red")]),
            timeseries("Consumers per device",
                "How many prepared claims use each device; above 1 only for shared devices "
                "(dralens_device_consumers).",
                [("dralens_device_consumers{S}",
                  "{{instance}} {{device}}")]),
            table("Devices",
                "Every device of the selected nodes with its UUID, product, type, parent GPU "
                "and MIG profile (dralens_device_info).",
                "dralens_device_info{S}",
                "Info",
                sort=False,
                unit="none"),
            timeseries("GPU utilisation by claim",
                "Utilisation of each prepared claim's devices, averaged over its devices: "
                "dcgm-exporter's DCGM_FI_DEV_GPU_UTIL (full GPUs) or "
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE (MIG instances) joined with "
                "dralens_node_claim_info on UUID and GPU_I_ID. A device shared by several "
                "claims shows its whole utilisation under each of them: never sum across "
                "claims. Says so when Prometheus has no dcgm-exporter series.",
                [("avg by (namespace, claim) (\n"
                  "  (dralens_node_claim_info{S}\n"
                  "    * on (UUID, GPU_I_ID) group_left ()\n"
                  '      max by (UUID, GPU_I_ID) (DCGM_FI_DEV_GPU_UTIL{cluster=~"$cluster"}))\n'
                  "  or\n"
                  "  (dralens_node_claim_info{S}\n"
                  "    * on (UUID, GPU_I_ID) group_left ()\n"
                  "      (100 * max by (UUID, GPU_I_ID) "
                  '(DCGM_FI_PROF_GR_ENGINE_ACTIVE{cluster=~"$cluster"})))\n'
                  ")",
                  "{{namespace}}/{{claim}}")],
                unit="percent", w=24,
                no_value=("No DCGM series: deploy dcgm-exporter and scrape it "
                          "(README: Join GPU utilisation with claims)")),
            timeseries("Device utilisation (sampled by dralens)",
                "How busy each device was in the node's last sampling round "
                "(--utilization-interval): NVML's utilisation rate for a full GPU, GPM "
                "graphics-engine activity for a MIG device on Hopper and later "
                "(dralens_device_utilization_ratio). Needs no dcgm-exporter.",
                [("dralens_device_utilization_ratio{S}", "{{instance}} {{device}}")],
                unit="percentunit"),
            timeseries("Idle prepared claims",
                "How long every device of each prepared claim has stayed below the node's "
                "--idle-threshold (dralens_node_claim_idle_seconds); claims that are busy read "
                "0 and are not shown. DralensGpuIdle fires past an hour.",
                [("dralens_node_claim_idle_seconds{S} > 0", "{{namespace}}/{{claim}}")],
                unit="s"),
            timeseries("Idle cost per hour by namespace",
                "What the GPU-equivalents of idle claims cost per hour, by namespace: the "
                "nodes' idle GPU-seconds (dralens_node_idle_gpu_seconds_total) at the cluster "
                "role's price per GPU-hour for their class and product "
                "(dralens_cluster_price_per_gpu_hour).",
                [("sum by (namespace) (rate(dralens_node_idle_gpu_seconds_total{S}"
                  "[$__rate_interval]) * on (device_class, product) group_left "
                  "max by (device_class, product) (dralens_cluster_price_per_gpu_hour))",
                  "{{namespace}}")],
                unit="none",
                stack=True),
        ]),
        row("MIG", [
            bargauge("MIG layout",
                "MIG instances per parent GPU and profile, by state: free or prepared "
                "(dralens_mig_devices).",
                "sum by (instance, parent, profile, state) (dralens_mig_devices{S})",
                "{{instance}} {{parent}} {{profile}} {{state}}"),
            bargauge("Placeable per profile",
                "How many more instances of each MIG profile still fit on each GPU, given its "
                "current instances and the placement rules (dralens_mig_placeable). 0 for "
                "every profile while instances are free means fragmentation.",
                "dralens_mig_placeable{S}",
                "{{instance}} {{parent}} {{profile}}"),
            timeseries("MIG operations",
                "Dynamic MIG instances created and destroyed per second, by result ok or error "
                "(dralens_mig_operations_total).",
                [("sum by (operation, result) "
                  "(rate(dralens_mig_operations_total{S}[$__rate_interval]))",
                  "{{operation}} {{result}}")],
                unit="ops"),
            timeseries("MIG operation duration p99",
                "99th percentile of the time to create or destroy one dynamic MIG instance "
                "(dralens_mig_operation_duration_seconds).",
                [("histogram_quantile(0.99, sum by (operation, le) "
                  "(rate(dralens_mig_operation_duration_seconds_bucket{S}[$__rate_interval])))",
                  "{{operation}}")],
                unit="s"),
        ]),
        row("Prepare", [
            heatmap("Prepare latency",
                "Distribution of the time to prepare one claim "
                "(dralens_node_claim_duration_seconds, operation prepare). Exemplars carry the "
                "claim's trace_id: with the data source's exemplar link to the tracing "
                "backend, a point in a slow bucket opens that claim's trace.",
                "sum by (le) "
                '(rate(dralens_node_claim_duration_seconds_bucket{S, operation="prepare"}[$__rate_interval]))'),
            timeseries("Prepare latency p50 and p99",
                "Median and 99th percentile of the time to prepare one claim, per node "
                "(dralens_node_claim_duration_seconds). Exemplars link to the claim's trace.",
                [("histogram_quantile(0.99, sum by (instance, le) "
                  '(rate(dralens_node_claim_duration_seconds_bucket{S, operation="prepare"}[$__rate_interval])))',
                  "p99 {{instance}}"),
                 ("histogram_quantile(0.5, sum by (instance, le) "
                  '(rate(dralens_node_claim_duration_seconds_bucket{S, operation="prepare"}[$__rate_interval])))',
                  "p50 {{instance}}")],
                unit="s",
                exemplar=True),
            timeseries("Prepare errors by reason",
                "Claims that failed to prepare, per second, by reason "
                "(dralens_node_claims_total, result error). Feeds DralensPrepareErrors.",
                [("sum by (instance, reason) "
                  '(rate(dralens_node_claims_total{S, operation="prepare", result="error"}[$__rate_interval]))',
                  "{{instance}} {{reason}}")],
                unit="ops",
                stack=True),
            timeseries("Phase duration p99",
                "99th percentile of the time spent in each phase of preparing a claim: "
                "fetch_claim, checkpoint, mig, sharing, cdi "
                "(dralens_node_phase_duration_seconds).",
                [("histogram_quantile(0.99, sum by (phase, le) "
                  "(rate(dralens_node_phase_duration_seconds_bucket{S}[$__rate_interval])))",
                  "{{phase}}")],
                unit="s"),
            timeseries("Sharing decisions",
                "Sharing decisions per second by strategy (exclusive, time_slicing, mps, "
                "shared_claim, consumable), result (granted, refused) and reason "
                "(dralens_sharing_decisions_total).",
                [("sum by (strategy, result, reason) "
                  "(rate(dralens_sharing_decisions_total{S}[$__rate_interval]))",
                  "{{strategy}} {{result}} {{reason}}")],
                unit="ops",
                stack=True),
            timeseries("Claims in flight and prepared",
                "Claims being prepared or unprepared right now (dralens_node_in_flight), and "
                "claims prepared on the node (dralens_node_prepared_claims).",
                [("sum by (instance, operation) (dralens_node_in_flight{S})",
                  "in flight {{instance}} {{operation}}"),
                 ("sum by (instance) (dralens_node_prepared_claims{S})",
                  "prepared {{instance}}")]),
        ]),
        row("ResourceSlices", [
            timeseries("Slice convergence passes",
                "ResourceSlice convergence passes per second by result: unchanged, changed or "
                "error (dralens_slices_syncs_total).",
                [("sum by (instance, result) "
                  "(rate(dralens_slices_syncs_total{S}[$__rate_interval]))",
                  "{{instance}} {{result}}")],
                unit="ops"),
            timeseries("Published slices and devices",
                "ResourceSlices and devices in each node's published pool "
                "(dralens_slices_published, dralens_slices_published_devices).",
                [("sum by (instance) (dralens_slices_published{S})",
                  "slices {{instance}}"),
                 ("sum by (instance) (dralens_slices_published_devices{S})",
                  "devices {{instance}}")]),
        ]),
        self_monitoring(watches=False),
    ],
)
