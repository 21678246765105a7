"""Warm restarts (components/serving/compilecache.py), held on the rendered plan: every engine pod of both tracks keeps
its compile caches on the stack's cache bucket, which nothing outside the stack shares and destroy deletes; and the
plan's time model gives a warm restart beside the first start. That the engines read these variables is held in the
engine tiers (tests/engine/test_vllm_code.py, tests/engine_tpu/test_torchtpu_code.py)."""

from __future__ import annotations

import pytest

from components.plan import loading
from components.serving import compilecache
from tests import preconditions as pc
from tests.config.test_config import parse

ENGINES = {"gpu": "vllm", "tpu": "vllm-tpu"}


def _engine_pods(plan, track: str):
    objects = pc.copy_objects(plan)
    found = [(where, spec, c) for where, spec in pc.pod_specs(objects) for c in spec["containers"]
             if c["name"] == ENGINES[track]]
    assert found
    return objects, found


@pytest.mark.parametrize("track", ["gpu", "tpu"])
def test_every_engine_pod_keeps_its_caches_on_the_stacks_bucket(plans, track):
    cfg = parse(track)
    objects, pods = _engine_pods(plans[track], track)
    for where, spec, engine in pods:
        [volume] = [v for v in spec["volumes"] if v["name"] == compilecache.VOLUME]
        assert volume["csi"]["driver"] == compilecache.CSI_DRIVER, where
        assert volume["csi"]["volumeAttributes"]["bucketName"] == compilecache.bucket_name(cfg), where
        assert "only-dir=cache" in volume["csi"]["volumeAttributes"]["mountOptions"], where
        mounts = {m["name"]: m["mountPath"] for m in engine["volumeMounts"]}
        assert mounts[compilecache.VOLUME] == compilecache.CACHE_MOUNT, where
        env = pc.env(engine)
        for name in compilecache.cache_env(cfg):
            assert str(env.get(name, "")).startswith(compilecache.CACHE_MOUNT + "/"), (where, name, env.get(name))
        assert spec["serviceAccountName"] == compilecache.SERVICE_ACCOUNT, where
        assert spec["automountServiceAccountToken"] is False, where
    templates = [t for o in objects if o["kind"] in ("DisaggregatedSet", "LeaderWorkerSet")
                 for t in _templates(o)]
    assert templates and all(t["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true" for t in templates)


def _templates(obj):
    if obj["kind"] == "DisaggregatedSet":
        return [r["spec"]["leaderWorkerTemplate"]["workerTemplate"] for r in obj["spec"]["roles"]]
    lwt = obj["spec"]["leaderWorkerTemplate"]
    return [lwt[k] for k in ("leaderTemplate", "workerTemplate") if k in lwt]


@pytest.mark.parametrize("track", ["gpu", "tpu"])
def test_the_cache_bucket_is_the_stacks_and_destroy_deletes_it(plans, track):
    plan = plans[track]
    bucket = plan.one("gcp:storage/bucket:Bucket", "compile-cache-bucket")["inputs"]
    assert bucket["name"] == compilecache.bucket_name(parse(track))
    assert bucket["forceDestroy"] is True and bucket["softDeletePolicy"]["retentionDurationSeconds"] == 0
    assert bucket["publicAccessPrevention"] == "enforced" and bucket["uniformBucketLevelAccess"] is True
    grants = {g["name"]: g["inputs"] for g in plan.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
              if g["name"].startswith("compile-cache-")}
    writer = grants["compile-cache-writer"]
    assert writer["condition"]["expression"].endswith(f'/objects/{compilecache.CACHE_PREFIX}/")')
    assert all(g["member"].endswith(f"/sa/{compilecache.SERVICE_ACCOUNT}") for g in grants.values())
    serving = ("kubernetes:disaggregatedset.x-k8s.io/v1:DisaggregatedSet",
               "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")
    servers = next(r for r in plan.resources if r["type"] in serving)
    assert {"compile-cache-writer", "compile-cache-reader", "compile-cache-sa"} <= plan.closure(servers["name"])


@pytest.mark.parametrize("track", ["gpu", "tpu"])
def test_a_warm_restart_skips_the_pull_and_the_compile(plans, track):
    cfg = parse(track)
    g = loading.group_start(cfg)
    assert g.warm_s == pytest.approx(g.first_s - g.pull_s - loading.COLD_COMPILE_S[track])
    assert 0 < g.warm_s < g.first_s
    assert f"warm restart {g.warm_s / 60:.1f} min" in plans[track].summary
    assert f"{g.warm_s / 60:.1f} min warm" in (plans[track].folder / "overview.txt").read_text()
