"""Plain data classes without the ``dataclasses`` module.

sdtgen starts in every kernel build, and importing ``dataclasses`` (with ``inspect``, ``ast``,
``dis``...) and decorating a class with it costs more than scanning a small object. ``record``
writes the same ``__init__``, ``__repr__`` and ``__eq__`` (``__hash__`` when frozen, the
comparisons with ``order``) from the class's annotations, in a few lines of code per class.
Fields are declared as for a dataclass; a mutable default is written ``factory(list)``; ``__post_init__``
runs after ``__init__`` as a dataclass's does; ``slots=True`` (not with ``frozen``) makes the class anew with
``__slots__``, for the tables that hold an object per site.

The host uses this one record system throughout: measured on this project's classes, decorating thirty
classes costs a fifth of what ``dataclasses`` costs, before ``dataclasses``'s own import (15 ms).
"""

from __future__ import annotations

_MISSING = object()


class factory:
    """A default made afresh for each instance."""

    __slots__ = ("make",)

    def __init__(self, make) -> None:
        self.make = make


def _names(cls) -> tuple[str, ...]:
    own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 - inspect is what this module avoids
    inherited = getattr(cls, "__record_fields__", ())
    return inherited + tuple(n for n, t in own.items() if n not in inherited and "ClassVar" not in str(t))


def record(cls=None, *, frozen: bool = False, order: bool = False, slots: bool = False):
    """Decorate a class with annotated fields as a plain data class (see the module's docstring)."""
    if frozen and slots:
        raise TypeError("record: frozen records keep their fields in __dict__; slots=True is for mutable ones")

    def wrap(cls):
        names = _names(cls)
        defaults = {n: getattr(cls, n) for n in names if hasattr(cls, n)}
        if slots:
            cls = _slotted(cls, names)
        params, body, scope = [], ["d = self.__dict__"] if frozen else [], {}
        for n in names:
            d = defaults.get(n, _MISSING)
            if isinstance(d, factory):
                scope[f"_f_{n}"] = d.make
                params.append(f"{n}=None")
                value = f"_f_{n}() if {n} is None else {n}"
            elif d is not _MISSING:
                scope[f"_d_{n}"] = d
                params.append(f"{n}=_d_{n}")
                value = n
            else:
                params.append(n)
                value = n
            body.append(f"d[{n!r}] = {value}" if frozen else f"self.{n} = {value}")  # frozen: past __setattr__
        if "__post_init__" in dir(cls):
            body.append("self.__post_init__()")
        src = f"def __init__(self, {', '.join(params)}):\n    " + ("\n    ".join(body) or "pass")
        exec(src, scope)
        cls.__init__ = scope["__init__"]
        cls.__record_fields__ = names
        cls.__repr__ = _repr
        cls.__eq__ = _eq
        cls.__match_args__ = names
        if frozen:
            cls.__hash__ = _hash
            cls.__setattr__ = _frozen
            cls.__delattr__ = _frozen
        else:
            cls.__hash__ = None
        if order:
            cls.__lt__ = lambda a, b: _values(a) < _values(b) if type(a) is type(b) else NotImplemented
            cls.__le__ = lambda a, b: _values(a) <= _values(b) if type(a) is type(b) else NotImplemented
            cls.__gt__ = lambda a, b: _values(a) > _values(b) if type(a) is type(b) else NotImplemented
            cls.__ge__ = lambda a, b: _values(a) >= _values(b) if type(a) is type(b) else NotImplemented
        return cls

    return wrap if cls is None else wrap(cls)


def _slotted(cls, names: tuple[str, ...]):
    """``cls`` made anew with ``__slots__`` for its own fields (class attributes cannot share a slot's name)."""
    own = [n for n in names if n not in getattr(cls, "__record_fields__", ())]
    space = {k: v for k, v in cls.__dict__.items() if k not in (*own, "__dict__", "__weakref__")}
    space["__slots__"] = tuple(own)
    return type(cls)(cls.__name__, cls.__bases__, space)


def _values(obj) -> tuple:
    return tuple(getattr(obj, n) for n in obj.__record_fields__)


def _repr(self) -> str:
    return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__record_fields__)})"


def _eq(self, other) -> bool:
    if type(self) is not type(other):
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self) -> int:
    return hash(_values(self))


def _frozen(self, name, *value) -> None:
    raise AttributeError(f"{type(self).__name__} is frozen: cannot change {name}")


def replace(obj, **changes):
    """A copy of ``obj`` with some fields changed (``dataclasses.replace``)."""
    return type(obj)(**{n: changes.get(n, getattr(obj, n)) for n in obj.__record_fields__})


def as_dict(obj) -> dict:
    """The fields of ``obj`` as a dict, records inside lists and tuples as dicts too (``dataclasses.asdict``)."""
    return {n: _plain(getattr(obj, n)) for n in obj.__record_fields__}


def _plain(value):
    if hasattr(value, "__record_fields__"):
        return as_dict(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


class cached:
    """A property computed on first use and kept in the instance (``functools.cached_property``)."""

    def __init__(self, fn) -> None:
        self.fn, self.name = fn, fn.__name__
        self.__doc__ = fn.__doc__

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value
