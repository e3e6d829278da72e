"""sdtgen.plaindata, the host's one record system, behaves as the standard library's dataclasses do (the
independent truth): the same class declared both ways gives the same construction, equality, hashing, repr,
ordering, defaults made afresh, __post_init__ and slots."""

from __future__ import annotations

import dataclasses

import pytest

from sdtgen.plaindata import as_dict, factory, record, replace


def both(frozen: bool = False, order: bool = False, slots: bool = False):
    """The class Point declared with plaindata and with dataclasses (no defaults shared between them)."""

    def body(deco, default):
        @deco
        class Point:
            x: int
            y: int = 0
            tags: list[str] = default()

            def __post_init__(self) -> None:
                if not frozen and not slots:  # a slotted class has no room for it
                    self.norm = abs(self.x) + abs(self.y)

        return Point

    ours = body(record(frozen=frozen, order=order, slots=slots), lambda: factory(list))
    theirs = body(dataclasses.dataclass(frozen=frozen, order=order, slots=slots),
                  lambda: dataclasses.field(default_factory=list))
    return ours, theirs


@pytest.mark.parametrize("frozen", [False, True])
def test_construction_equality_repr_and_hash_are_a_dataclasss(frozen):
    ours, theirs = both(frozen=frozen, order=True)
    for args in [(1,), (1, 2), (3, -4, ["a"])]:
        a, b = ours(*args), theirs(*args)
        assert repr(a).partition("(")[2] == repr(b).partition("(")[2] and repr(a).startswith("Point(")
        assert a == ours(*args) and a != ours(99) and a != theirs(*args)  # another class: not equal
        assert (ours(*args) < ours(args[0] + 1)) == (theirs(*args) < theirs(args[0] + 1))
    if frozen:
        assert hash(ours(1, 2, ())) == hash(ours(1, 2, ())) and ours(1, 2, ()) in {ours(1, 2, ())}
        with pytest.raises(AttributeError):
            ours(1).x = 2
    else:
        assert ours.__hash__ is None is theirs.__hash__  # mutable: unhashable, as a dataclass with eq


def test_a_mutable_default_is_made_afresh_for_each_instance():
    ours, _ = both()
    a, b = ours(1), ours(1)
    a.tags.append("x")
    assert b.tags == [] and a.tags == ["x"]


def test_post_init_runs_after_the_fields_are_set():
    ours, theirs = both()
    assert ours(3, -4).norm == theirs(3, -4).norm == 7


def test_slots_leave_no_instance_dict_and_refuse_an_attribute_that_is_no_field():
    ours, theirs = both(slots=True)
    a, b = ours(1, 2), theirs(1, 2)
    assert not hasattr(a, "__dict__") and not hasattr(b, "__dict__")
    assert ours.__slots__ == theirs.__slots__ == ("x", "y", "tags")
    with pytest.raises(AttributeError):
        a.color = "red"
    assert a == ours(1, 2) and repr(a).startswith("Point(x=1, y=2")


def test_frozen_and_slots_together_are_refused_at_declaration():
    with pytest.raises(TypeError, match="slots=True is for mutable ones"):
        record(frozen=True, slots=True)


def test_replace_and_as_dict_are_the_standard_librarys():
    ours, theirs = both(frozen=True)
    assert as_dict(replace(ours(1, 2), y=5)) == dataclasses.asdict(dataclasses.replace(theirs(1, 2), y=5))
