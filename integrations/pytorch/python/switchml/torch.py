"""SwitchML backend for torch.distributed (PyTorch 2.x).

Importing this module registers the backend name ``"switchml"`` for CPU and CUDA tensors::

    import switchml.torch  # noqa: F401  (registers the backend)
    import torch.distributed as dist
    dist.init_process_group("switchml", ...)   # needs SWITCHML_CONTROLLER, at least on rank 0
    # or one device only: dist.init_process_group("cpu:gloo,cuda:switchml", ...)

CUDA tensors are staged through pinned host memory: a non-blocking device-to-host copy on the
caller's current stream, the switch call once that copy is done (a staging thread, in call
order), and a copy back on a staging stream; works and futures carry the device, so wait() and
DDP's comm hooks make the consumer's stream wait on an event, not the host.

All-reduce (SUM, AVG; float32, int32, float16, bfloat16) runs through the SwitchML switch;
what SwitchML cannot aggregate (MAX, MIN, PRODUCT, bitwise ops; float64, int64, int8, uint8, bool)
goes to an inner Gloo group, counted in the group's ``stats()["fallback_allreduces"]`` and
logged once per reason; broadcast, all-gather, barrier and the other collectives run through
that Gloo group too. All-reduces on one group behave as if run one after another in call order
(stream semantics): chained async calls on one tensor see each other's results.

Settings come from environment variables, read when a group is created:

  SWITCHML_CONTROLLER            host:port of the switch's session service (`switchml switch
                                 --controller-port`). Required on rank 0; the other ranks take
                                 rank 0's value from the torch.distributed store when unset.
  SWITCHML_WORKER_THREADS        worker threads per process (library default 1)
  SWITCHML_WINDOW_PACKETS        packets in flight per worker (library default 256)
  SWITCHML_ELEMENTS_PER_PACKET   64, 256, 512 or 1024 (library default 256)
  SWITCHML_CALL_TIMEOUT_MS       an all-reduce call fails when no result arrives for this long
                                 (default 10000); SWITCHML_JOB_TIMEOUT_MS is its deprecated
                                 name (used when it is unset, with a note on stderr)
  SWITCHML_BIND_IP               local IPv4 for the data sockets (default: any)
  SWITCHML_ADVERTISE_IP          address registered with the switch (default: the one used to
                                 reach the controller)
  SWITCHML_JOB_ID, SWITCHML_JOB_TOKEN
                                 join a job made with `switchml jobs create` (default: the
                                 switch's reference session)
  SWITCHML_TLS_CA, SWITCHML_TLS_CERT, SWITCHML_TLS_KEY, SWITCHML_TLS_SERVER_NAME, SWITCHML_INSECURE
                                 TLS towards the controller (docs/operations.md "Securing"),
                                 read by the backend's C++ side; without TLS a job's token goes
                                 only to a controller on this host unless SWITCHML_INSECURE=1
  SWITCHML_OPERATOR_TOKEN        not needed; in the reference session, a timed-out all-reduce
                                 then also names the ranks the switch has not heard from (a
                                 job's own token does that for a `switchml jobs create` job)
  SWITCHML_STAGING_CHUNK_BYTES   CUDA tensors are staged in chunks of this many bytes (default
                                 4194304 = 4 MiB), so that copies and switch traffic overlap
  SWITCHML_HALF_VIA_SWITCH       1: float16/bfloat16 SUM/AVG go through the switch, widened to
                                 float32; 0 (default): to the inner Gloo group, which is faster
                                 for them on bandwidth-bound links (the switch carries 4 bytes
                                 per element, a ring 2 x 2(n-1)/n)
  SWITCHML_FAILOVER              1 (default): survive a failing switch. When an all-reduce
                                 fails because the switch, a shard or the controller is gone,
                                 every rank finishes the calls in flight on a second Gloo group
                                 (the host path) and runs every later all-reduce there; logged
                                 once, counted in stats()["failover*"]. 0: such calls fail.
  SWITCHML_REJOIN                1 (default): after a failover, come back to the switch when the
                                 job can be served again (the switch restarted, or the
                                 controller re-placed the job): rank 0 asks the controller in the
                                 background; at every dist.barrier() on the host path the ranks
                                 agree on its answer and move back there together. 0: stay on
                                 the host path.
  SWITCHML_REJOIN_MIN_BACKOFF_MS, SWITCHML_REJOIN_MAX_BACKOFF_MS
                                 rank 0's first question after the failover, and the longest
                                 wait between questions (defaults 1000 and 30000; doubling)
  GLOO_SOCKET_IFNAME             network interface(s) of the inner Gloo group (as for Gloo)

The three window/packet settings, the staging chunk size, SWITCHML_HALF_VIA_SWITCH,
SWITCHML_FAILOVER and SWITCHML_REJOIN must be equal on every rank
(all but the first three are checked when the group is created: ValueError naming the values).
"""

import datetime
import os
import sys

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist
from torch.distributed import PrefixStore, ProcessGroupGloo

from ._torch import SwitchMLBackend, SwitchMLConfig

__all__ = ["BACKEND_NAME", "SwitchMLBackend", "SwitchMLConfig", "backend", "config_from_env", "stats"]

BACKEND_NAME = "switchml"


def _env_bool(env, name):
    raw = env.get(name, "").strip()
    if raw not in ("", "0", "1"):
        raise ValueError(f"{name} must be 0 or 1, got {raw!r}")
    return raw == "1"


def _env_int(env, name, minimum):
    raw = env.get(name, "").strip()
    if not raw:
        return 0
    try:
        value = int(raw, 10)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _call_timeout_ms(env):
    """SWITCHML_CALL_TIMEOUT_MS, or its deprecated name SWITCHML_JOB_TIMEOUT_MS (0 = default)."""
    new = _env_int(env, "SWITCHML_CALL_TIMEOUT_MS", 1)
    if not env.get("SWITCHML_JOB_TIMEOUT_MS", "").strip():
        return new
    old = _env_int(env, "SWITCHML_JOB_TIMEOUT_MS", 1)
    print("switchml: note: SWITCHML_JOB_TIMEOUT_MS is deprecated, use SWITCHML_CALL_TIMEOUT_MS", file=sys.stderr)
    if new and new != old:
        raise ValueError(f"SWITCHML_JOB_TIMEOUT_MS (deprecated) {old} and SWITCHML_CALL_TIMEOUT_MS {new} "
                         "disagree; set only SWITCHML_CALL_TIMEOUT_MS")
    return old


def config_from_env(environ=None):
    """Builds a SwitchMLConfig from the SWITCHML_* variables (see the module docstring)."""
    env = os.environ if environ is None else environ
    config = SwitchMLConfig()
    config.controller_address = env.get("SWITCHML_CONTROLLER", "").strip()
    config.num_worker_threads = _env_int(env, "SWITCHML_WORKER_THREADS", 1)
    config.window_packets = _env_int(env, "SWITCHML_WINDOW_PACKETS", 1)
    config.elements_per_packet = _env_int(env, "SWITCHML_ELEMENTS_PER_PACKET", 1)
    config.call_timeout = datetime.timedelta(milliseconds=_call_timeout_ms(env))
    config.bind_ip = env.get("SWITCHML_BIND_IP", "").strip()
    config.advertise_ip = env.get("SWITCHML_ADVERTISE_IP", "").strip()
    config.job_id = _env_int(env, "SWITCHML_JOB_ID", 1)
    config.job_token = env.get("SWITCHML_JOB_TOKEN", "").strip()
    config.staging_chunk_bytes = _env_int(env, "SWITCHML_STAGING_CHUNK_BYTES", 4)
    config.half_via_switch = _env_bool(env, "SWITCHML_HALF_VIA_SWITCH")
    config.failover = env.get("SWITCHML_FAILOVER", "").strip() == "" or _env_bool(env, "SWITCHML_FAILOVER")
    config.rejoin = env.get("SWITCHML_REJOIN", "").strip() == "" or _env_bool(env, "SWITCHML_REJOIN")
    config.rejoin_min_backoff = datetime.timedelta(milliseconds=_env_int(env, "SWITCHML_REJOIN_MIN_BACKOFF_MS", 1))
    config.rejoin_max_backoff = datetime.timedelta(milliseconds=_env_int(env, "SWITCHML_REJOIN_MAX_BACKOFF_MS", 1))
    return config


def backend(group=None, device=None):
    """The SwitchMLBackend of `group` (default: the default group) for `device` ("cpu" or
    "cuda"; default: the first of the two that the group runs on switchml).

    Raises ValueError naming the backend the group uses instead, if it is not "switchml".
    """
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    found = []
    for dev in ([device] if device is not None else ["cpu", "cuda"]):
        try:
            b = pg._get_backend(torch.device(dev))
        except RuntimeError:  # no backend for that device in this group
            found.append(f"none for {dev}")
            continue
        if isinstance(b, SwitchMLBackend):
            return b
        found.append(f"{type(b).__name__} for {dev}")
    raise ValueError(f"the group has no switchml backend ({', '.join(found)})")


def stats(group=None):
    """The counters of `group`'s SwitchML backend (SwitchMLBackend.stats()): the client library's
    calls_* and packet counters, and the all-reduces sent to the inner Gloo group per reason."""
    return backend(group).stats()


def _create_backend(store, rank, world_size, timeout):
    """The creator torch.distributed calls for backend "switchml" (non-extended API).

    The inner Gloo group (everything SwitchML does not aggregate) is torch's own
    ProcessGroupGloo on its own key space of the store; it honours GLOO_SOCKET_IFNAME.
    """
    config = config_from_env()  # bad settings fail before any connection is made
    gloo = ProcessGroupGloo(PrefixStore("gloo", store), rank, world_size, timeout)
    _check_failover_agrees(store, rank, world_size, config.failover)
    host = _host_group(store, rank, world_size, timeout) if config.failover else None
    return SwitchMLBackend(store, rank, world_size, timeout, config, gloo, host)


def _check_failover_agrees(store, rank, world_size, failover):
    """Every rank publishes its SWITCHML_FAILOVER and reads every other's, so that all of them
    raise (instead of the ranks with failover waiting for the others' host group until the
    group timeout)."""
    store.set(f"switchml/failover/{rank}", "1" if failover else "0")
    values = [store.get(f"switchml/failover/{r}").decode() for r in range(world_size)]
    if len(set(values)) > 1:
        per_rank = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
        raise ValueError(f"switchml: SWITCHML_FAILOVER differs between ranks ({per_rank}); every rank must "
                         "use the same value")


def _host_group(store, rank, world_size, timeout):
    """The failover's host path: a Gloo group of its own (its collectives run at points that
    differ between ranks and must not interleave with the delegated ones), with one thread, so
    that its all-reduces run one after another in call order (two re-run calls on one tensor
    must not run at once)."""
    opts = ProcessGroupGloo._Options()
    opts._timeout = timeout
    ifnames = os.environ.get("GLOO_SOCKET_IFNAME", "").strip()
    if ifnames:
        opts._devices = [ProcessGroupGloo.create_device(interface=i.strip()) for i in ifnames.split(",") if i.strip()]
    else:
        opts._devices = [ProcessGroupGloo.create_default_device()]
    opts._threads = 1
    return ProcessGroupGloo(PrefixStore("switchml-host", store), rank, world_size, opts)


if BACKEND_NAME.upper() not in dist.Backend._plugins:
    # One backend object serves both devices of a group made with "switchml"; with a device map
    # ("cpu:gloo,cuda:switchml") it serves the devices mapped to it.
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["cpu", "cuda"])
