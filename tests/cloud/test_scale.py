"""Scale-out past one rack and one slice pair: N GPU slices (one NVL72 rack and node pool each) and N TPU slices
behind one router. Each cross-layer config rule rejects with one line; the plans of 3 GPU and 4 TPU slices hold
the pools, placement, ComputeDomain, router and figures; 1 -> 3 slices only adds and changes counts."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from components.facts import catalog, contract
from components.serving.modelservers import RACK_TOPOLOGY_KEY
from tests import schemas
from tests.config.test_config import error, parse
from tests.conftest import Plan, rendered, run_plan, stack_document, write_stack
from tools.preview import plan_diff, scheduling

NODE_POOL = "gcp:container/nodePool:NodePool"
POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"
RESERVATION = "projects/kimi-test-project/reservations/test-a4x-max-reservation/reservationBlocks/test-block"
RACKS = ["rack-a", "rack-b", "rack-c"]


def manifest(plan: Plan, kind: str) -> dict:
    [found] = [m for m in plan.manifests if m["kind"] == kind]
    return found


def epp_config(plan: Plan) -> dict:
    values = plan.one("kubernetes:helm.sh/v4:Chart", "router-chart")["inputs"]["values"]
    return yaml.safe_load(values["router"]["epp"]["pluginsCustomConfig"]["kimi-k3-1.yaml"])


# ------------------------------------------------------------------------- config: one line per rule
def racks(**more):
    return {"gpu__reservationBlock": "test-block", "gpu__reservationSubBlocks": RACKS, **more}


@pytest.mark.parametrize("stack,changes,expected", [
    # A slice must fit one NVL72 domain: nodes <= 18, GPUs per pod x pods <= 72.
    ("gpu", {"gpu__slices": 3, "gpu__decodeNodesPerGroup": 8},
     "kimi-k3-1:gpu.decodeNodesPerGroup = 8: a slice of 3x4 prefill + 1x8 decode = 20 pods x 4 GPUs = 80 GPUs; "
     "one NVL72 domain holds 18 nodes, 72 GPUs (add gpu.slices instead)"),
    # Slices <= the reserved sub-blocks named.
    ("gpu", racks(gpu__slices=4),
     "kimi-k3-1:gpu.slices = 4: gpu.slices = 4 needs one sub-block per slice; gpu.reservationSubBlocks names 3 "
     "(name 4, or lower gpu.slices to 3)"),
    ("gpu", racks(gpu__slices=2, gpu__reservationSubBlocks=["rack-a", "rack-a"]),
     "kimi-k3-1:gpu.reservationSubBlocks = [\"rack-a\", \"rack-a\"]: each slice needs its own NVL72 rack: name "
     "every sub-block once"),
    ("gpu", {"gpu__slices": 2, "gpu__reservationSubBlocks": RACKS[:2]},
     "kimi-k3-1:gpu.reservationSubBlocks = [\"rack-a\", \"rack-b\"]: naming sub-blocks needs gpu.reservationBlock "
     "too (the block that holds them)"),
    ("gpu", {"gpu__reservationBlock": "test-block", "gpu__reservationSubBlocks": ["Rack A"]},
     "kimi-k3-1:gpu.reservationSubBlocks = 'Rack A': must be 1-63 characters of a-z, 0-9 and '-', start with a "
     "letter and not end with '-' (https://cloud.google.com/compute/docs/naming-resources)"),
    # Two small slices could land in one rack, where placement admits one: their racks must be named.
    ("gpu", {"gpu__slices": 2, "gpu__prefillGroups": 1},
     "kimi-k3-1:gpu.slices = 2: slices of 8 nodes: Compute Engine may place two slices' pools in one 18-node "
     "sub-block, where placement admits only one slice; name one sub-block per slice in gpu.reservationSubBlocks"),
    ("gpu", {"gpu__slices": 17}, "kimi-k3-1:gpu.slices = '17': input should be less than or equal to 16"),
    # TPU slices vs the reservation, or Spot.
    ("tpu", {"tpu__slices": 5, "tpu__reservationHosts": 16},
     "kimi-k3-1:tpu.slices = 5: 5 slices x 4 hosts = 20 tpu7x VMs, but the reservation holds 16 "
     "(tpu.reservationHosts); use at most 4 slices"),
    ("tpu", {"tpu__reservation": None, "tpu__spot": True, "tpu__reservationHosts": 16},
     "kimi-k3-1:tpu.reservationHosts = 16: tpu.spot=true uses no reservation; unset tpu.reservationHosts"),
])
def test_cross_layer_rule_rejects_with_one_line(stack, changes, expected):
    assert error(stack, **changes) == expected


def test_what_the_rules_admit():
    three = parse("gpu", **racks(gpu__slices=3))
    assert (three.gpu.slices, three.gpu.slice_nodes, three.gpu.node_count) == (3, 16, 48)
    # 16-node slices cannot share an 18-node rack, so unnamed racks are fine.
    assert parse("gpu", gpu__slices=3).gpu.node_count == 48
    assert parse("gpu", gpu__slices=2, gpu__prefillGroups=1, **racks()).gpu.slice_nodes == 8
    assert parse("tpu", tpu__slices=4, tpu__reservationHosts=16).tpu.slices == 4


# ------------------------------------------------------------------------- the 3-slice GPU plan
def test_one_pool_per_rack_under_one_workload_policy(variants):
    plan = variants["gpu3"]
    [policy] = plan.of_type(POLICY)
    assert policy["inputs"]["workloadPolicy"] == {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "1x72"}
    pools = [r for r in plan.of_type(NODE_POOL) if r["parent"] == "gpu"]
    assert [p["inputs"]["name"] for p in pools] == ["a4x-max-nvl72-0", "a4x-max-nvl72-1", "a4x-max-nvl72-2"]
    for index, (pool, rack) in enumerate(zip(pools, RACKS, strict=True)):
        inputs = pool["inputs"]
        assert inputs["nodeCount"] == 16 <= catalog.NVL72_MAX_NODES
        assert inputs["placementPolicy"] == {"type": "COMPACT", "policyName": policy["inputs"]["name"]}
        assert inputs["nodeConfig"]["reservationAffinity"]["values"] == [f"{RESERVATION}/reservationSubBlocks/{rack}"]
        assert inputs["nodeConfig"]["labels"][contract.SLICE_NODE_LABEL] == str(index)


def test_one_disaggregated_set_with_slices_and_rack_placement(variants, shared):
    plan = variants["gpu3"]
    dset = manifest(plan, "DisaggregatedSet")
    assert dset["spec"]["slices"] == 3
    assert dset["spec"]["placementPolicy"] == {"type": "ExclusiveTopology", "topology": RACK_TOPOLOGY_KEY}
    # The KEP: a role must not also carry the LWS exclusive-topology annotation (the webhook rejects it).
    for role in dset["spec"]["roles"]:
        assert scheduling.EXCLUSIVE_TOPOLOGY_ANNOTATION not in (role.get("metadata") or {}).get("annotations", {})
    # `pulumi up` waits for every slice's groups: roleStatuses sum all slices.
    wait = dset["metadata"]["annotations"]["pulumi.com/waitFor"]
    assert '.readyReplicas}=9' in wait and '.readyReplicas}=3' in wait
    schemas.validate(dset, shared / "crds")
    crd = yaml.load((shared / "crds" / "disaggregatedset.x-k8s.io_disaggregatedsets.yaml").read_text(),
                    Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # 1.5 MB: libyaml where PyYAML has it
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert dset["spec"]["placementPolicy"]["type"] in spec["placementPolicy"]["properties"]["type"]["enum"]


def test_one_compute_domain_for_every_rack(plans, variants):
    one, three = manifest(plans["gpu"], "ComputeDomain"), manifest(variants["gpu3"], "ComputeDomain")
    # Immutable spec, independent of the slice count: one domain spans every rack's clique.
    assert one["spec"] == three["spec"] and three["spec"]["numNodes"] == 0


def test_one_inference_pool_and_prefill_kept_in_the_decode_slice(variants):
    plan = rendered(variants["gpu3"])  # the InferencePool and the DRA driver come from charts
    pools = [m for m in plan.manifests if m["kind"] == "InferencePool"]
    assert len(pools) == 1
    config = epp_config(plan)
    plugins = {p.get("name", p["type"]): p for p in config["plugins"]}
    assert plugins["topology-extractor"]["parameters"] == {"rack": contract.DISAGGREGATED_SLICE_LABEL}
    assert plugins["same-slice-prefill"] == {"type": "topology-affinity-filter", "name": "same-slice-prefill",
                                             "parameters": {"minAffinity": "rack"}}
    prefill = next(p for p in config["schedulingProfiles"] if p["name"] == "prefill")
    refs = [p["pluginRef"] for p in prefill["plugins"]]
    assert refs.index("prefill-filter") < refs.index("same-slice-prefill") < refs.index("prefix-cache-affinity-filter")
    # Alpha plugins: the EPP must allow them.
    values = plan.one("kubernetes:helm.sh/v4:Chart", "router-chart")["inputs"]["values"]
    assert values["router"]["epp"]["flags"]["allow-experimental-plugins"] is True


def test_every_slice_schedules_into_its_own_rack(variants):
    plan = rendered(variants["gpu3"])  # the InferencePool and the DRA driver come from charts
    report = scheduling.check(plan.resources, plan.manifests)
    assert not report.failures
    gpu_loads = [load for load in report.loads if load.pool.name.startswith("a4x-max-nvl72-")]
    assert [sum(len(n) for n in load.nodes) for load in gpu_loads] == [16, 16, 16]
    assert len({load.pool.labels[RACK_TOPOLOGY_KEY] for load in gpu_loads}) == 3


def test_scheduling_fails_a_slice_without_a_rack_and_an_idle_pool(variants):
    plan = rendered(variants["gpu3"])  # the InferencePool and the DRA driver come from charts
    manifests = copy.deepcopy(plan.manifests)
    manifest_ds = next(m for m in manifests if m["kind"] == "DisaggregatedSet")
    manifest_ds["spec"]["slices"] = 4
    [failure] = scheduling.check(plan.resources, manifests).failures
    assert failure.startswith(f"DisaggregatedSet kimi-k3-1/kimi-k3-1-vllm slice 3 of 4 fits no {RACK_TOPOLOGY_KEY} "
                              "domain of its own (3 in the pools, 3 taken)")
    manifest_ds["spec"]["slices"] = 2
    [failure] = scheduling.check(plan.resources, manifests).failures
    assert failure == "pool a4x-max-nvl72-2: no serving pod lands on its 16 accelerator nodes (billed, idle)"


def test_summary_gives_per_slice_and_total_capacity_and_cost(variants):
    summary = variants["gpu3"].summary
    assert "48 x a4x-maxgpu-4g-metal (192 nvidia-gb300) in 3 slice(s), one NVL72 rack (node pool) each" in summary
    per_slice = next(line for line in summary.splitlines() if line.startswith("per slice"))
    total = next(line for line in summary.splitlines() if line.startswith("total (3 slices"))
    hbm = int(per_slice.split("decode groups: ")[1].split(" in HBM")[0].replace(",", ""))
    assert f"{3 * hbm:,} sessions in HBM" in total
    assert "each slice adds its accelerators (unpriced: set kimi-k3-1:cost.gpuNodeHourUsd) + $" in per_slice
    # More readers of the one volume: the throughput is sized for all 12 replicas.
    assert "12 replicas on 48 nodes load their copies in" in summary


# ------------------------------------------------------------------------- the 4-slice TPU plan
def test_tpu_slices_are_pools_and_lws_groups(variants, shared):
    plan = variants["tpu4"]
    pools = [r for r in plan.of_type(NODE_POOL) if r["parent"] == "tpu"]
    assert [p["inputs"]["name"] for p in pools] == [f"tpu7x-2x2x4-{i}" for i in range(4)]
    assert all(p["inputs"]["nodeCount"] == 4 for p in pools)
    assert len(plan.of_type(POLICY)) == 1
    lws = manifest(plan, "LeaderWorkerSet")
    [scaled] = [m for m in plan.manifests if m["kind"] == "ScaledObject"]
    assert (lws["spec"]["replicas"], scaled["spec"]["maxReplicaCount"]) == (1, 4)  # from the minimum up to 4
    assert lws["metadata"]["annotations"][scheduling.EXCLUSIVE_TOPOLOGY_ANNOTATION] == scheduling.GKE_POOL_LABEL
    assert len([m for m in plan.manifests if m["kind"] == "InferencePool"]) == 1
    report = scheduling.check(plan.resources, plan.manifests)
    assert not report.failures
    assert [sum(len(n) for n in load.nodes) for load in report.loads if load.pool.name.startswith("tpu7x")] == [4] * 4
    assert "total (4 slices behind one router)" in plan.summary
    schemas.validate(lws, shared / "crds")


# ------------------------------------------------------------------------- 1 -> 3 slices: additions only
@pytest.fixture(scope="module")
def one_to_three(tmp_path_factory) -> plan_diff.StackDiff:
    """The same stack (name and all) at 1 and at 3 slices, the racks named from the start."""
    folder = tmp_path_factory.mktemp("scale-diff")
    sides = []
    for slices in (1, 3):
        config = dict(stack_document("gpu3")["config"])
        config["kimi-k3-1:gpu.slices"] = slices
        # Autoscaling applies to one GPU slice only (it would be removed at 3): this diff is about the slices.
        config["kimi-k3-1:autoscaling.enabled"] = False
        (folder / str(slices)).mkdir()
        stack = write_stack(folder / str(slices), "gpu", config)
        proc = run_plan(folder / f"out{slices}", "--stack-file", str(stack))
        assert proc.returncode == 0, proc.stderr
        sides.append(plan_diff.load_stack(folder / f"out{slices}" / "gpu"))
    return plan_diff.diff_stack("gpu", *sides)


def test_one_to_three_slices_adds_and_changes_counts(one_to_three):
    entries = one_to_three.resources + one_to_three.objects
    created = sorted(e.title for e in entries if e.action == "create")
    assert any("**gpu-1**" in t for t in created) and any("**gpu-2**" in t for t in created), created
    replaced = [e.title for e in entries if e.action == "replace"]
    for kept in ("**gpu-0**", "ComputeDomain", "DisaggregatedSet", "**gpu-policy**", "InferencePool"):
        assert not any(kept in t for t in replaced), (kept, replaced)
    # The one deletion: the VolumeAttributesClass of the old throughput, whose successor the claim now names
    # (parameters are immutable: one class per value; components/weights/volume.py).
    deleted = [e.title for e in entries if e.action == "delete"]
    assert deleted == ["`VolumeAttributesClass kimi-k3-1-models-hdml-38400mi`"], deleted
    assert "`VolumeAttributesClass kimi-k3-1-models-hdml-115200mi` (`weights-volume-throughput`)" in created, created
    # The only replacement: the StorageClass, whose create-time throughput now serves 12 readers (an API object,
    # no data: the volume already hydrated keeps its claim; docs/scaling.md).
    assert all("StorageClass" in t for t in replaced), replaced
    # The claim is updated in place to the new class: that is what makes the existing volume's throughput follow.
    [claim] = [e for e in one_to_three.objects if "`PersistentVolumeClaim " in e.title]
    assert claim.action == "update" and "spec.volumeAttributesClassName" in {c.path for c in claim.changes}
    figures = {f.label: (f.old, f.new) for f in one_to_three.figures}
    assert figures["serving slices"] == (1, 3) and figures["accelerator nodes"] == (16, 48)
    [dset] = [e for e in one_to_three.objects if "`DisaggregatedSet " in e.title]
    assert dset.action == "update" and "spec.slices" in {c.path for c in dset.changes}


def test_one_to_three_in_place_gets_what_the_existing_volume_gives(one_to_three, variants):
    """1 slice deployed, then 3 on the same stack: the base plan's outputs are the stack's state after the first
    up. The existing volume has 1 slice's throughput (16 readers' worth) until the driver applies the new class, so
    the groups the scale-up adds load at a third of their share for up to HDML_MODIFY_LAG_S: 10.7 min, not the
    3.6 of a fresh 3-slice stack, and the startup budget must cover that plus the engine's start."""
    from components.plan import loading

    fresh = variants["gpu3"].outputs["weightLoad"]
    assert (fresh["throughputMiBps"], fresh["readers"]) == (115200, 48)
    lines = one_to_three.in_place
    assert lines[0].startswith("volume throughput 38,400 -> 115,200 MiB/s for 48 reader nodes, on the existing "
                               "volume (the base plan's outputs): the claim moves to the VolumeAttributesClass of "
                               "115,200 MiB/s"), lines
    # 539 GB per node at 38,400 MiB/s / 48 = 800 MiB/s: 10.7 min, inside the 20 min the change may take.
    assert lines[1].startswith("groups this up adds load in at most 10.7 min (the old 38,400 MiB/s shared by 48 "
                               "nodes for up to 20 min while the change takes effect, then 115,200); 3.6 min on a "
                               "new volume; 10.7 min if it kept 38,400 MiB/s"), lines
    budget = fresh["startupBudgetSeconds"]
    assert lines[2] == (f"startup probe budget {budget / 60:.1f} min vs load 10.7 + start besides the load 23.0 = "
                        "33.7 min: covers it")
    # The pods' probes carry that budget: the same figure in the 3-slice plan's DisaggregatedSet.
    dset = manifest(variants["gpu3"], "DisaggregatedSet")
    for role in dset["spec"]["roles"]:
        probe = role["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["startupProbe"]
        assert probe["failureThreshold"] * probe["periodSeconds"] == budget
    # Every in-place growth of the committed shape, 1 -> N: the budget (independent of what the volume had, so a
    # scale-up never rolls the groups) covers the slowest added group's load and start.
    one = parse("gpu")
    for slices in range(2, 17):
        grown_cfg = parse("gpu", gpu__slices=slices)
        load = loading.grown_load_s(loading.node_reads(grown_cfg), loading.reader_nodes(grown_cfg),
                                    loading.throughput_mibps(one), loading.throughput_mibps(grown_cfg))
        rest = loading.ENGINE_START_S["gpu"]
        assert load + rest <= loading.startup_budget_s(grown_cfg), slices
        # ... which it would not if the volume kept its 1-slice throughput (the gap the class closes), from 9 up.
        stuck = loading.grown_load_s(loading.node_reads(grown_cfg), loading.reader_nodes(grown_cfg),
                                     loading.throughput_mibps(one), loading.throughput_mibps(one))
        assert (stuck + rest > loading.startup_budget_s(grown_cfg)) == (slices >= 9), slices


def test_one_to_three_prices_each_added_slice(one_to_three):
    [cost] = [line for line in one_to_three.in_place if line.startswith("cost:")]
    hourly = next(f for f in one_to_three.figures if f.label == "hourly cost")
    assert cost.startswith(f"cost: {hourly.new - hourly.old:+,.2f} USD/h for +2 slice(s), "
                           f"{(hourly.new - hourly.old) / 2:+,.2f} USD/h per added slice"), cost


def test_plan_diff_report_reads_as_additions(one_to_three):
    text = "\n".join(plan_diff.stack_report(one_to_three))
    assert "+ create" in text and "`gcp:container/nodePool:NodePool` **gpu-1**" in text
    assert "| serving slices | 1 | 3 |" in text


def test_stack_fixtures_exist():
    for name in ("gpu3", "tpu4"):
        assert (Path(__file__).resolve().parents[1] / "stacks" / f"Pulumi.{name}.yaml").is_file()


def test_plan_summary_names_the_rack_of_every_slice(variants):
    summary = variants["gpu3"].summary
    for index in range(3):
        assert (f"placed: DisaggregatedSet kimi-k3-1/kimi-k3-1-vllm slice {index} -> a4x-max-nvl72-{index} "
                f"({RACK_TOPOLOGY_KEY} domain of its own)") in summary
    assert "placed: LeaderWorkerSet kimi-k3-1/kimi-k3-1-vllm-tpu group 3 -> tpu7x-2x2x4-3" in variants["tpu4"].summary


def test_router_figures_stay_per_endpoint(plans, variants):
    """Slices add endpoints, not bigger ones: the prefix model's capacity per server does not change."""
    for one, many in (("gpu", "gpu3"), ("tpu", "tpu4")):
        assert epp_config(plans[one])["plugins"] and [
            p["parameters"]["lruCapacityPerServer"] for p in epp_config(plans[one])["plugins"]
            if p["type"] == "approx-prefix-cache-producer"] == [
            p["parameters"]["lruCapacityPerServer"] for p in epp_config(variants[many])["plugins"]
            if p["type"] == "approx-prefix-cache-producer"]


def test_hyperdisk_throughput_grows_with_readers_within_the_volume_limit():
    from components.plan import loading

    sizes = [loading.throughput_mibps(parse("gpu", gpu__slices=n)) for n in (1, 3, 16)]
    assert sizes[0] < sizes[1] <= sizes[2] <= catalog.HYPERDISK_ML_MAX_MIBPS
    readers = [loading.reader_nodes(parse("gpu", gpu__slices=n)) for n in (1, 3)]
    assert readers == [16, 48]


def test_scraped_series_carry_the_slice_and_the_dashboard_splits_by_it(plans, variants):
    for plan, source in ((variants["gpu3"], contract.DISAGGREGATED_SLICE_LABEL),
                         (variants["tpu4"], "leaderworkerset.sigs.k8s.io/group-index")):
        engines = [m for m in plan.manifests if m["kind"] == "PodMonitoring" and "router" not in m["metadata"]["name"]]
        assert engines and all(m["spec"]["targetLabels"]["fromPod"] == [{"from": source, "to": "slice"}]
                               for m in engines)
    dashboard = variants["gpu3"].one("gcp:monitoring/dashboard:Dashboard")["inputs"]["dashboardJson"]
    assert "by (slice)" in dashboard and "slice ${slice}" in dashboard


def test_priced_slices_add_up():
    from stacks.base import slice_lines

    per_slice, total = slice_lines(parse("gpu", gpu__slices=3, cost__gpuNodeHourUsd="42.50"))
    assert "; each slice adds $680.00/h accelerators + $" in per_slice  # 16 nodes x $42.50
    # The increment is the stack with one slice more less the stack: what grows with slices, nothing else.
    from components.plan import cost

    three, four = (parse("gpu", gpu__slices=n, cost__gpuNodeHourUsd="42.50") for n in (3, 4))
    grows, _ = cost.slice_increment(three)
    assert grows == pytest.approx(cost.total(cost.hourly_costs(four))[0] - cost.total(cost.hourly_costs(three))[0]
                                  - 680)
    assert f"${grows:,.2f}/h more for its boot disks" in per_slice
    rest = float(total.split("rest of the stack $")[1].split("/h")[0].replace(",", ""))
    assert total.split("; ")[-1].startswith(f"${3 * 680 + rest:,.2f}/h (3 x $680.00 + rest of the stack")
