"""A Perfetto protobuf trace: one track per CPU and one per task, an instant TrackEvent per event, arguments as
debug annotations.

Built with the perfetto package's own protos (an optional extra, `pip install 'sdtgen[perfetto]'`,
since only this format needs it), so the messages are Perfetto's and nothing of its schema is kept here.
Each runtime packet becomes one serialized ``Trace`` message (concatenated ``Trace`` messages are one
trace). Probe names, categories and argument names are interned once at the start (``interned_data``),
so an event carries only numbers: faster than the hand-written encoder of full strings it replaced
(bench: 3.0 against 5.2 us an event on a 2-core machine) and a file 40% smaller.

Time: TracePacket timestamps are nanoseconds of the trace's default clock, ``ticks * 10**9 // hz`` of
the kernel's clock (model.ticks_to_ns). A CPU whose ring lost events gets a counter track under its
own, ``CPU n lost events``, holding the count from its first event's time.

Tasks (docs/runtime.md, Task context): an event of a task (a kernel with the task hook; its id not 0) goes on
that task's thread track, as Perfetto shows a process's threads: a ThreadDescriptor (tid the task's id, its name
from the task events, described again when it changes) under one process track for the kernel (a pid no Linux
process has, as the kernel's tasks are not a process's threads), its CPU as the event's ``cpu`` annotation. An
event of no task (a kernel without the hook, id 0: an interrupt, the kernel's own context) stays on its CPU's
track.

Machines (docs/trace.md, "Machines"): the trace of a machine (TraceMeta.machine) says it on every packet
(TracePacket.machine_id), its tracks are grouped under a process track named after it (its CPUs' tracks and its
tasks' threads), their uuids its own (the machine id in their top 32 bits), and its timestamps are its kernel's
clock in ns, a clock of its sequence's own (KERNEL_CLOCK) that a ClockSnapshot pairs with the host's
BUILTIN_CLOCK_REALTIME, the trace's primary clock: Perfetto puts several machines' events in one real time.
Several machines' sinks write one file at once (sdtgen/trace/merged.py), each its own sequence.
"""

from __future__ import annotations

import os

from sdtgen.errors import SdtError
from sdtgen.event_format import ArgType, event_format
from sdtgen.trace.model import DEFAULT_SESSION, Lost, TraceMeta, ticks_to_ns
from sdtgen.trace.packets import Event, Packet
from sdtgen.trace.sink import OutputFile

SEQUENCE = 0x5D7  # trusted_packet_sequence_id of every packet: one writer, one sequence
LOST_TRACKS = 1 << 32  # counter track uuids: this plus the CPU's track uuid
KERNEL_TRACK = 1 << 33  # the kernel's process track, the tasks' parent
TASK_TRACKS = 1 << 34  # task track uuids: this plus the task's number in order of appearance
KERNEL_PID = 0x7FFF0000  # the kernel's tasks' pid: above Linux's PID_MAX_LIMIT (2^22), so no process's
CPU_ARG = "cpu"  # the annotation that says a task's event's CPU
# A machine's tracks: its id in the uuid's top 32 bits, then these bases (the CPU's track is its number + 1).
MACHINE_LOST, MACHINE_KERNEL, MACHINE_TASKS = 1 << 28, 2 << 28, 3 << 28
KERNEL_CLOCK = 64  # a machine's kernel clock, in ns: the first of the clock ids a sequence scopes to itself


def cpu_track(cpu: int) -> int:
    return cpu + 1  # track uuids are any non-zero 64-bit number unique in the trace


def track_bases(machine_id: int) -> tuple[int, int, int, int]:
    """The uuids a trace's tracks count from: CPUs', lost counters', the kernel's process's, tasks' (0: a trace of
    no machine)."""
    if not machine_id:
        return 0, LOST_TRACKS, KERNEL_TRACK, TASK_TRACKS
    base = machine_id << 32
    return base, base | MACHINE_LOST, base | MACHINE_KERNEL, base | MACHINE_TASKS


def _protos():
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    except ImportError:
        raise SdtError("", "--trace-format perfetto needs the perfetto package",
                       "pip install 'sdtgen[perfetto]' (or give --trace-format ctf or chrome)") from None
    return perfetto_trace_pb2


def _value_field(t: ArgType) -> str:
    if t.kind == "str":
        return "string_value"
    return "pointer_value" if t.hex else "int_value" if t.kind == "int" else "uint_value"


class PerfettoSink:
    """A Perfetto trace file, each runtime packet's events written as they come; the lost counts close it. Given
    ``output`` (a merged trace's file), the sink writes its machine's ``sequence`` into it and leaves the file to
    its owner."""

    def __init__(self, path: str | os.PathLike[str] | None, meta: TraceMeta, bits: int,
                 output: OutputFile | None = None, sequence: int = SEQUENCE) -> None:
        self.pb = _protos()
        self.meta = meta
        self.sequence = sequence
        self.machine_id = meta.machine.machine_id if meta.machine is not None else 0
        self.cpu_base, self.lost_base, self.kernel_track, self.task_base = track_bases(self.machine_id)
        self.snapshot = meta.machine is not None  # a ClockSnapshot is owed before the first event
        # Which runtime session the tracks hold (docs/sessions.md): said in their names when not the default one.
        self.of_session = "" if meta.session == DEFAULT_SESSION else f" (session {meta.session})"
        self.shared = output is not None
        self.out = output if output is not None else OutputFile(path, "Perfetto trace")
        try:
            self._begin(meta, bits)
        except BaseException:  # an interrupt here, too, leaves no temporary file
            self.abort()
            raise

    def _begin(self, meta: TraceMeta, bits: int) -> None:
        """The first packet: every probe's name, category and argument names, interned."""
        self.first: dict[int, int] = {}
        self.tracks: set[int] = set()
        self.tasks: dict[int, tuple[int, str | None]] = {}  # task id -> its track's uuid, the name it says
        names = sorted({f"arg{i}" for p in meta.probes for i in range(len(p.arg_types))} | {CPU_ARG})
        arg_iid = {n: i + 1 for i, n in enumerate(names)}  # iids are non-zero
        cat_iid = {c: i + 1 for i, c in enumerate(sorted({p.provider for p in meta.probes}))}
        self.fields = {}  # spec -> (name iid, category iid, [(argument name iid, value field)])
        for i, p in enumerate(meta.probes):
            args = [(arg_iid[f"arg{j}"], _value_field(t))
                    for j, t in enumerate(event_format(p.key, p.spec, p.arg_types, bits).argtypes)]
            self.fields[p.spec] = (i + 1, cat_iid[p.provider], args)
        trace = self.pb.Trace()
        first = self._packet(trace)
        first.sequence_flags = self.pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        interned = first.interned_data
        for p in meta.probes:
            interned.event_names.add(iid=self.fields[p.spec][0], name=p.spec)
        for c, iid in cat_iid.items():
            interned.event_categories.add(iid=iid, name=c)
        for n, iid in arg_iid.items():
            interned.debug_annotation_names.add(iid=iid, name=n)
        self.cpu_iid = arg_iid[CPU_ARG]
        if self.machine_id:  # its timestamps in its kernel's clock; its process, every track's parent, named
            first.trace_packet_defaults.timestamp_clock_id = KERNEL_CLOCK
            self._kernel_track(trace, meta.machine.name)
        self.out.write(trace.SerializeToString())

    def _packet(self, trace):
        p = trace.packet.add()
        p.trusted_packet_sequence_id = self.sequence
        if self.machine_id:
            p.machine_id = self.machine_id
        return p

    def _kernel_track(self, trace, name: str) -> None:
        """The kernel's process track: the parent of its tasks' tracks (and of its CPUs', for a machine)."""
        d = self._packet(trace).track_descriptor
        d.uuid = self.kernel_track
        d.process.pid = KERNEL_PID
        d.process.process_name = f"{name}{self.of_session}"

    def _clock_snapshot(self, trace, ticks: int) -> None:
        """The machine's kernel clock at ``ticks`` and the host's real time then (its correlation), the real time
        the trace's primary clock."""
        self.snapshot = False
        ns, m = ticks_to_ns(ticks, self.meta.clock_hz), self.meta.machine
        snap = self._packet(trace).clock_snapshot
        snap.clocks.add(clock_id=KERNEL_CLOCK, timestamp=ns)
        snap.clocks.add(clock_id=self.pb.BUILTIN_CLOCK_REALTIME, timestamp=m.offset_ns + ns)
        snap.primary_trace_clock = self.pb.BUILTIN_CLOCK_REALTIME

    def _cpu(self, cpu: int) -> int:
        return self.cpu_base + cpu_track(cpu)

    def _track(self, trace, cpu: int) -> None:
        """The CPU's track, described before its first event (a machine's under its process)."""
        if cpu not in self.tracks:
            self.tracks.add(cpu)
            d = self._packet(trace).track_descriptor
            d.uuid = self._cpu(cpu)
            d.name = f"CPU {cpu}{self.of_session}"
            if self.machine_id:
                d.parent_uuid = self.kernel_track

    def _task_track(self, trace, task) -> int:
        """The task's thread track, described before its first event and again when its name changed."""
        uuid, said = self.tasks.get(task.id, (0, None))
        if uuid and said == task.name:
            return uuid
        if not self.tasks and not self.machine_id:  # the kernel's process, the parent of every task's track
            self._kernel_track(trace, "kernel")
        uuid = uuid or self.task_base + len(self.tasks)
        self.tasks[task.id] = (uuid, task.name)
        d = self._packet(trace).track_descriptor
        d.uuid = uuid
        d.parent_uuid = self.kernel_track
        name = f"{task.name or 'task'} {task.id}"
        if task.id < 1 << 63:  # a thread's tid is an int64
            d.thread.pid = KERNEL_PID
            d.thread.tid = task.id
            d.thread.thread_name = task.name or name
        else:
            d.name = name
        return uuid

    def packet(self, cpu: int, data: bytes, packet: Packet, events: list[Event] | None) -> None:
        trace = self.pb.Trace()
        if self.snapshot:
            self._clock_snapshot(trace, packet.begin)
        self._track(trace, cpu)
        hz, fields, add = self.meta.clock_hz, self.fields, trace.packet.add
        needs, instant = self.pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE, self.pb.TrackEvent.TYPE_INSTANT
        cpu_iid, sequence, machine, cpu_base = self.cpu_iid, self.sequence, self.machine_id, self.cpu_base
        for e in events or ():
            task = e.task
            track = self._task_track(trace, task) if task is not None and task.id else cpu_base + cpu_track(e.cpu)
            self.first.setdefault(e.cpu, e.ts)
            name, category, args = fields[e.probe]
            p = add()
            p.timestamp = ticks_to_ns(e.ts, hz)
            p.trusted_packet_sequence_id = sequence
            if machine:
                p.machine_id = machine
            p.sequence_flags = needs
            te = p.track_event
            te.type = instant
            te.name_iid = name
            te.track_uuid = track
            te.category_iids.append(category)
            annotate = te.debug_annotations.add
            for (iid, field), v in zip(args, e.args, strict=True):
                a = annotate()
                a.name_iid = iid
                setattr(a, field, "<unreadable>" if v is None else v)
            if track != cpu_base + cpu_track(e.cpu):  # a task's track: the CPU it ran on is the event's
                a = annotate()
                a.name_iid = cpu_iid
                a.uint_value = e.cpu
        self.out.write(trace.SerializeToString())

    def finish(self, lost: dict[int, Lost]) -> None:
        """The trace closed and put in place, or (on any failure) nothing."""
        try:
            self._end(lost)
        except BaseException:
            self.abort()
            raise

    def _end(self, lost: dict[int, Lost]) -> None:
        """A counter track under each CPU that lost events, holding the count from its first event's time."""
        trace = self.pb.Trace()
        if self.snapshot:  # no packet came: the machine's clock is still said
            self._clock_snapshot(trace, 0)
        for cpu, counts in sorted(lost.items()):
            if not counts.total:
                continue
            self._track(trace, cpu)
            d = self._packet(trace).track_descriptor
            d.uuid = self.lost_base + cpu_track(cpu)
            d.parent_uuid = self._cpu(cpu)
            d.name = f"CPU {cpu}{self.of_session} lost events"
            d.counter.SetInParent()
            c = self._packet(trace)
            c.timestamp = ticks_to_ns(self.first.get(cpu, 0), self.meta.clock_hz)
            c.track_event.type = self.pb.TrackEvent.TYPE_COUNTER
            c.track_event.track_uuid = self.lost_base + cpu_track(cpu)
            c.track_event.counter_value = counts.total
        self.out.write(trace.SerializeToString())
        if not self.shared:
            self.out.commit()

    def abort(self) -> None:
        """The file removed; a merged trace's machine only stops (what it wrote stays, the file is its owner's)."""
        if not self.shared and hasattr(self, "out"):
            self.out.discard()


