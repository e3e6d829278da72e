"""Aggregations printed as DTrace prints them: the histogram below is the output of dtrace(1M) for
wrquantize.d as Oracle's DTrace guide shows it (its rows' counts put back in the table), byte for byte."""

from __future__ import annotations

from sdtgen.dscript.compiler import AggInfo
from sdtgen.dscript.merge import Key, Totals
from sdtgen.dscript.printa import as_json, bucket_value, print_all, printa

# From the guide: `@time[execname] = quantize(timestamp - self->ts)`, the bash and gnome-terminal rows.
GUIDE = """
  bash                                              
           value  ------------- Distribution ------------- count    
            8192 |                                         0        
           16384 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@         4        
           32768 |                                         0        
           65536 |                                         0        
          131072 |@@@@@@@@                                 1        
          262144 |                                         0        

  gnome-terminal                                    
           value  ------------- Distribution ------------- count    
            4096 |                                         0        
            8192 |@@@@@@@@@@@@@                            5        
           16384 |@@@@@@@@@@@@@                            5        
           32768 |@@@@@@@@@@@                              4        
           65536 |@@@                                      1        
          131072 |                                         0        

"""  # noqa: W291 (dtrace pads its columns)


def buckets(counts: dict[int, int]) -> list[int]:
    out = [0] * 127
    for value, n in counts.items():
        out[next(i for i in range(127) if bucket_value(i) == value)] = n
    return out


def test_quantize_prints_dtraces_histogram_in_dtraces_order():
    info = AggInfo(1, "time", "quantize", ("probefunc",))
    rows = {(Key("gnome-terminal", "gnome-terminal"),): buckets({8192: 5, 16384: 5, 32768: 4, 65536: 1}),
            (Key("bash", "bash"),): buckets({16384: 4, 131072: 1})}
    assert printa(info, rows) == GUIDE


def test_counts_print_as_dtraces_columns_sorted_by_value_then_key():
    info = AggInfo(1, "", "count", ("probefunc", "int"))
    rows = {(Key("write", "write"), Key(2, 2)): [12], (Key("read", "read"), Key(2**64 - 1, -1)): [5],
            (Key("read", "read"), Key(1, 1)): [5], (Key("open", "open"), Key(3, 3)): [7]}
    text = printa(info, rows)
    # ties on the value go by the keys, an integer key as libdtrace compares it: unsigned (-1 after 1)
    assert text == ("\n"
                    f"  {'read':<50} {1:16d} {5:16d}\n"
                    f"  {'read':<50} {-1:16d} {5:16d}\n"
                    f"  {'open':<50} {3:16d} {7:16d}\n"
                    f"  {'write':<50} {2:16d} {12:16d}\n")


def test_avg_prints_the_sum_divided_by_the_count_toward_zero_and_json_keeps_both():
    info = AggInfo(3, "a", "avg", ())
    totals = Totals((info,), {})
    totals.rows[3] = {(): [4, (-9) & (2**64 - 1)]}
    assert print_all(totals) == f"\n {-2:16d}\n"
    assert as_json(totals)["aggregations"][0]["rows"] == [{"keys": [], "value": -2, "count": 4, "sum": -9}]


def test_lquantize_labels_its_ends_as_dtrace_does():
    info = AggInfo(1, "", "lquantize", (), low=0, step=10, levels=3)
    text = printa(info, {(): [0, 2, 0, 0, 1]})
    rows = [ln for ln in text.splitlines() if "|" in ln]
    assert [ln[:16].strip() for ln in rows] == ["< 0", "0", "10", "20", ">= 30"]
    assert rows[1].endswith("2        ") and rows[-1].endswith("1        ")

