"""Aggregations as DTrace's printa() prints them, and as JSON.

Rows are sorted by value (count, sum, min, max by the value, avg by the average, quantize and lquantize
by the sum of bucket values weighted by their counts, then by the count at zero), ties by the keys (integers
as unsigned 64-bit values, strings as strcmp orders them), as libdtrace sorts. An integer key is " %16lld", a
string key "  %-50s", a value " %16lld"; quantize and lquantize print DTrace's histogram.
"""

from __future__ import annotations

from fractions import Fraction
from functools import cmp_to_key

from sdtgen.dscript.compiler import AggInfo
from sdtgen.dscript.merge import Key, Totals, to_signed
from sdtgen.dscript.tables import capacity
from sdtgen.layout import VALUES

NBUCKETS = VALUES["SDT_AGG_QUANTIZE_BUCKETS"]
ZERO = VALUES["SDT_AGG_ZERO_BUCKET"]
BAR = 40


def bucket_value(i: int) -> int:
    """DTRACE_QUANTIZE_BUCKETVAL: the lower bound of quantize's bucket ``i`` (its upper bound for negatives)."""
    if i < ZERO:
        return -(1 << (ZERO - 1 - i))
    return 0 if i == ZERO else 1 << (i - ZERO - 1)


def result(info: AggInfo, values: list[int]) -> int | list[int]:
    """What a row shows: the value (avg: sum / count toward zero, as C divides), or the signed buckets."""
    if info.func == "count":
        return values[0]
    if info.func == "avg":
        count, total = to_signed(values[0]), to_signed(values[1])
        if not count:
            return 0
        q = abs(total) // abs(count)
        return -q if (total < 0) != (count < 0) else q
    if info.func in ("quantize", "lquantize"):
        return [to_signed(v) for v in values]
    return to_signed(values[0])


def _weight(info: AggInfo, buckets: list[int]) -> tuple[int, int]:
    """libdtrace's order of two histograms: the sum of bucket values times counts, then the count at zero."""
    if info.func == "quantize":
        return sum(bucket_value(i) * c for i, c in enumerate(buckets)), buckets[ZERO]
    base, step, levels = info.low, info.step, info.levels
    total = buckets[0] * (base - 1) + sum(buckets[i + 1] * (base + i * step) for i in range(levels))
    total += buckets[levels + 1] * (base + levels * step + 1)
    zero = 0
    if base - 1 == 0:
        zero = buckets[0]
    elif any(base + i * step == 0 for i in range(levels)):
        zero = buckets[1 + next(i for i in range(levels) if base + i * step == 0)]
    elif base + levels * step + 1 == 0:
        zero = buckets[levels + 1]
    return total, zero


def sorted_rows(info: AggInfo, rows: dict[tuple[Key, ...], list[int]]) -> list[tuple[tuple[Key, ...], object]]:
    shown = [(keys, result(info, values)) for keys, values in rows.items()]

    def order(value: object) -> tuple[int, ...]:
        return _weight(info, value) if isinstance(value, list) else (value,)

    def compare(a: tuple, b: tuple) -> int:
        va, vb = order(a[1]), order(b[1])
        if va != vb:
            return -1 if va < vb else 1
        ka, kb = [k.raw for k in a[0]], [k.raw for k in b[0]]
        return (ka > kb) - (ka < kb)

    return sorted(shown, key=cmp_to_key(compare))


def _quantline(val: int, total: int, positives: bool, negatives: bool) -> str:
    def depth(width: int) -> int:
        return int(Fraction(abs(val) * width, total) + Fraction(1, 2)) if total else 0

    if not negatives:
        d = depth(BAR) if positives else 0
        return f"|{'@' * d}{' ' * (BAR - d)} {val:<9d}\n"
    if not positives:
        d = depth(BAR)
        return f"{' ' * (BAR - d)}{'@' * d}| {val:<9d}\n"
    half = BAR // 2
    d = depth(half)
    if val <= 0:
        return f"{' ' * (half - d)}{'@' * d}|{' ' * half} {val:<9d}\n"
    return f"{' ' * 20}|{'@' * d}{' ' * (half - d)} {val:<9d}\n"


def _histogram(labels: list[str], data: list[int], first: int, last: int) -> str:
    span = data[first:last + 1]
    positives, negatives = any(v > 0 for v in span), any(v < 0 for v in span)
    total = sum(abs(v) for v in span)
    out = [f"\n{'value':>16} {'------------- Distribution -------------':>41} {'count':<9}\n"]
    out += [f"{labels[i]:>16} " + _quantline(data[i], total, positives, negatives) for i in range(first, last + 1)]
    return "".join(out)


def quantize_text(buckets: list[int]) -> str:
    n = len(buckets)
    first = 0
    while first < n - 1 and buckets[first] == 0:
        first += 1
    if first == n - 1:  # no data (libdtrace's test stops short of the last bucket): the buckets around 0
        first, last = ZERO - 1, ZERO + 1
    else:
        first = max(first - 1, 0)
        last = n - 1
        while last > 0 and buckets[last] == 0:
            last -= 1
        last = min(last + 1, n - 1)
    return _histogram([str(bucket_value(i)) for i in range(n)], buckets, first, last)


def lquantize_text(info: AggInfo, buckets: list[int]) -> str:
    levels, base, step = info.levels, info.low, info.step
    first, last = 0, levels + 1
    while first <= levels + 1 and buckets[first] == 0:
        first += 1
    if first > levels + 1:
        first, last = 0, 2
    else:
        first = max(first - 1, 0)
        while last > 0 and buckets[last] == 0:
            last -= 1
        last = min(last + 1, levels + 1)
    labels = [f"< {base}"] + [str(base + (i - 1) * step) for i in range(1, levels + 1)] + \
        [f">= {base + levels * step}"]
    return _histogram(labels, buckets, first, last)


def _key_text(k: Key) -> str:
    return f"  {k.shown:<50}" if isinstance(k.shown, str) else f" {k.shown:16d}"


def printa(info: AggInfo, rows: dict[tuple[Key, ...], list[int]]) -> str:
    """One aggregation as dtrace prints it when it ends: a blank line, then a line per row."""
    out = ["\n"]
    for keys, value in sorted_rows(info, rows):
        line = "".join(_key_text(k) for k in keys)
        if info.func == "quantize":
            line += quantize_text(value)
        elif info.func == "lquantize":
            line += lquantize_text(info, value)
        else:
            line += f" {value:16d}"
        out.append(line + "\n")
    return "".join(out)


def print_all(totals: Totals) -> str:
    """Every aggregation, in the order the script named them."""
    return "".join(printa(info, totals.rows.get(info.id, {})) for info in totals.aggregations)


def _buckets_json(info: AggInfo, buckets: list[int]) -> list[dict]:
    out = []
    for i, count in enumerate(buckets):
        if not count:
            continue
        if info.func == "quantize":
            lo = bucket_value(i)
            hi = lo if i < ZERO else 0 if i == ZERO else (1 << (i - ZERO)) - 1
            lo, hi = (-(1 << (ZERO - i)) + 1, lo) if i < ZERO else (lo, hi)
            if i == 0:
                lo = None
            if i == NBUCKETS - 1:
                hi = None
        else:
            lo = None if i == 0 else info.low + (i - 1) * info.step
            hi = info.low - 1 if i == 0 else None if i == info.levels + 1 else info.low + i * info.step - 1
        out.append({"min": lo, "max": hi, "count": count})
    return out


def as_json(totals: Totals) -> dict:
    """Every aggregation's rows (sorted as printa sorts them), and the kernel's counts of what it could not take."""
    aggs = []
    for info in totals.aggregations:
        rows = []
        for keys, value in sorted_rows(info, totals.rows.get(info.id, {})):
            row: dict = {"keys": [k.shown for k in keys]}
            if isinstance(value, list):
                row["buckets"] = _buckets_json(info, value)
            else:
                row["value"] = value
            if info.func == "avg":
                raw = totals.rows[info.id][keys]
                row["count"], row["sum"] = to_signed(raw[0]), to_signed(raw[1])
            rows.append(row)
        entry = {"name": info.name, "function": info.func, "rows": rows}
        if info.func == "lquantize":
            entry.update(low=info.low, high=info.low + info.levels * info.step, step=info.step)
        aggs.append(entry)
    return {"aggregations": aggs, "dropped": sum(totals.dropped.values()), "errors": sum(totals.errors.values()),
            "nested": sum(totals.nested.values()),
            "capacity": [{"cpu": cpu, "entries": capacity(*shape), "slots": shape[0], "arena": shape[1]}
                         for cpu, shape in sorted(totals.shape.items())]}
