"""One aggregation script over the fixture kernel's probes, what it must hold after given calls on every CPU (from the
native run's firings, tests/native_oracle.py, with the test's own model of each function, tests/dscript_oracle.py),
and what a session printed with --json, in one shape to compare: every target's test uses them.

Histograms are compared by the values they sort: the firings' values grouped by DTrace's bucket (the model's
quantize_bucket, lquantize_bucket) must be the groups the printed buckets' bounds make, each with its count.
"""

from __future__ import annotations

from dscript_oracle import aggregate, lquantize_bucket, quantize_bucket
from native_oracle import Call

SCRIPT = ("hk:sched:run:tick { @ticks = count(); @acc = sum(arg1); @lo = min(arg1 - 1000); @hi = max(arg1); "
          "@mean = avg(arg1); @q = quantize(arg1); @lq = lquantize(arg0, 0, 40, 3) }\n"
          "hk:mem:alloc:entry, hk:mem:alloc:fail /arg0 > 0/ @sizes[probename] = quantize(arg0)\n"
          "hk:vfs:lookup:component /arg0 == \"usr\" || arg1 > 3/ @comp[probefunc, cpu] = count()")
CALLS = [Call("sched_run", (40,)), Call("vfs_lookup_id", (1,)), Call("vfs_lookup_id", (2,)),
         Call("kmem_alloc", (-5,)), Call("kmem_alloc", (70000,)), Call("kmem_alloc", (300,)), Call("sched_run", (9,))]


def signed(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


def run_args(calls: list[Call]) -> list[str]:
    """The calls as --run/--arg options (every CPU makes each)."""
    out = []
    for c in calls:
        out += ["--run", f"{c.function}:long", *[f"--arg={a}" for a in c.args]]
    return out


def values_of(firings: list[dict], probe: str) -> list[list]:
    # the native run prints an int as %d and a long as %llu: a long is read back as the signed value C holds
    return [[signed(a) if isinstance(a, int) else a for a in f["args"]] for f in firings if f["probe"] == probe]


def histogram(values: list[int], bucket) -> list[tuple[int, ...]]:
    groups: dict[int, list[int]] = {}
    for v in values:
        groups.setdefault(bucket(v), []).append(v)
    return sorted(tuple(sorted(g)) for g in groups.values())


def expected(firings: list[dict], cpus: int) -> dict[str, dict]:
    """Per aggregation, its rows: keys -> a value, or the firings' values grouped by bucket. Every CPU made the
    calls once, so every CPU fired as the native run did."""
    tick = values_of(firings, "hk:sched:run:tick") * cpus
    acc, i = [a[1] for a in tick], [a[0] for a in tick]
    one = ()
    count, total = aggregate("avg", acc)
    mean = abs(signed(total)) // count * (-1 if signed(total) < 0 else 1)  # C divides toward zero
    rows: dict[str, dict] = {
        "ticks": {one: len(acc)}, "acc": {one: signed(aggregate("sum", acc)[0])},
        "lo": {one: min(acc) - 1000}, "hi": {one: max(acc)}, "mean": {one: mean},
        "q": {one: histogram(acc, quantize_bucket)},
        "lq": {one: histogram(i, lambda v: lquantize_bucket(v, 0, 3, 13))}}
    sizes = {}
    for name in ("entry", "fail"):
        vs = [a[0] for a in values_of(firings, f"hk:mem:alloc:{name}") if a[0] > 0] * cpus
        if vs:
            sizes[(name,)] = histogram(vs, quantize_bucket)
    rows["sizes"] = sizes
    comp = [a for a in values_of(firings, "hk:vfs:lookup:component") if a[0] == "usr" or a[1] > 3]
    rows["comp"] = {("lookup", cpu): len(comp) for cpu in range(cpus)} if comp else {}
    return rows


def printed(event: dict, firings: list[dict], cpus: int) -> dict[str, dict]:
    """The aggregations of a --json "aggregations" event in expected()'s shape: a histogram row's buckets turned
    back into the values of ``firings`` each holds (checking that each holds as many as it counts)."""
    raw = {"q": [a[1] for a in values_of(firings, "hk:sched:run:tick")] * cpus,
           "lq": [a[0] for a in values_of(firings, "hk:sched:run:tick")] * cpus}
    out: dict[str, dict] = {}
    for agg in event["aggregations"]:
        rows = {}
        for row in agg["rows"]:
            keys = tuple(row["keys"])
            if "buckets" not in row:
                rows[keys] = row["value"]
                continue
            if agg["name"] == "sizes":
                vs = [a[0] for a in values_of(firings, f"hk:mem:alloc:{keys[0]}") if a[0] > 0] * cpus
            else:
                vs = raw[agg["name"]]
            groups = []
            for b in row["buckets"]:
                inside = [v for v in vs if (b["min"] is None or v >= b["min"]) and (b["max"] is None or v <= b["max"])]
                assert len(inside) == b["count"], (agg["name"], b, inside)
                groups.append(tuple(sorted(inside)))
            rows[keys] = sorted(groups)
        out[agg["name"]] = rows
    return out
