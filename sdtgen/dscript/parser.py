"""DTrace's clause syntax, the subset the kernel's programs run: text -> clauses (sdtgen/dscript/tree.py).

    clause    := probes [ '/' expression '/' ] [ aggregation | '{' aggregation ( ';' aggregation )* [';'] '}' ]
    probes    := provider:module:function:name ( ',' provider:module:function:name )*
    aggregation := '@' [name] [ '[' expression ( ',' expression )* ']' ] '=' function '(' [arguments] ')'

Clauses are separated by ';' or a newline (a clause's predicate and actions may start lines of their own, as
DTrace scripts lay them out). Expressions are C's, with D's ``^^`` (logical exclusive or),
integer and string constants, casts to integer types and the variables arg0..arg5, cpu, probeprov,
probemod, probefunc and probename. Inside a predicate a '/' at the outermost level ends it when what
follows it is the end, a newline, ';', '{', '@' or '/' (DTrace's own lookahead); otherwise it divides.
Comments are /* ... */. Every error is a ParseError at an offset of the text.
"""

from __future__ import annotations

import re

from sdtgen.dscript.tree import Aggregation, Binary, Cast, Clause, Int, Node, Str, Ternary, Unary, Var
from sdtgen.plaindata import record

MAX_TEXT = 1 << 16  # characters of a script
MAX_DEPTH = 32  # nesting of parentheses and unary operators (what the parser recurses through)
MAX_TREE = 100  # nesting of an expression's tree (what the compiler recurses through; a flat chain is not nested)
DIGITS_64 = 22  # digits of the longest integer constant of 64 bits, in any base C writes (octal: 22)


class ParseError(ValueError):
    def __init__(self, message: str, at: int, fix: str = "") -> None:
        super().__init__(message)
        self.at = at
        self.fix = fix  # what to write instead (a DTrace construct the kernel's programs do not have)


# DTrace's constructs the kernel's programs do not have: what each is, and what to write instead.
ARGS = ("args[] is not supported", "read the arguments as arg0..arg5: each is read as its probe declares it (an "
        "integer extended by its type, a char * as a string)")
SELF = ("thread-local (self->) and clause-local (this->) variables are not supported: a program keeps no state "
        "but its aggregations", "aggregate by a key instead (@[cpu], @[arg0]), or record the firings (a clause "
        "without aggregations) and join them in the trace")
FUNCTIONS = {
    "stringof": ("stringof() is not supported", "a char * argument already is a string: compare it with a string "
                 "constant (arg0 == \"eth0\")"),
    "copyinstr": ("copyinstr() is not supported", "a char * argument already is a string, read from kernel memory: "
                  "compare it with a string constant (arg0 == \"eth0\")"),
    "stack": ("stack() is not supported: the kernel's programs read no stack", "key by probefunc, or record the "
              "firings (a clause without aggregations) and read where each came from in the trace"),
    "ustack": ("ustack() is not supported: the kernel's programs read no stack", "key by probefunc"),
    "trace": ("trace() is not supported", "a clause without aggregations records the firing with its arguments, as "
              "trace() of each would"),
    "printf": ("printf() is not supported", "a clause without aggregations records the firing with its arguments; "
               "the trace shows them"),
    "printa": ("printa() in a clause is not supported", "the session prints the aggregations at its end, each "
               "--interval and on the console's printa"),
    "clear": ("clear() in a clause is not supported", "the console's clear does what DTrace's trunc() does"),
    "trunc": ("trunc() in a clause is not supported", "the console's clear empties every aggregation"),
    "stddev": ("stddev() is not supported", "use avg(x), or quantize(x) for the spread"),
}


@record(frozen=True)
class Token:
    kind: str  # int str ident punct probe newline end
    text: str
    at: int
    value: object = None


_PUNCT = sorted(["@", "[", "]", "(", ")", "{", "}", ",", ";", "/", "*", "%", "+", "-", "!", "~", "<", ">", "<=",
                 ">=", "==", "!=", "&&", "||", "^^", "&", "|", "^", "<<", ">>", "?", ":", "="], key=len, reverse=True)
_PROBE = re.compile(r"[A-Za-z0-9_\-:*?\[\]!.$]+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"(0[xX][0-9A-Fa-f]+|0[0-7]*|[1-9][0-9]*)([uUlL]*)")
_ESCAPES = {"n": 10, "t": 9, "r": 13, "0": 0, "\\": 92, '"': 34, "'": 39, "a": 7, "b": 8, "f": 12, "v": 11}
TYPE_WORDS = {"char", "short", "int", "long", "signed", "unsigned", "const", "volatile", "int8_t", "int16_t",
              "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "intptr_t", "uintptr_t",
              "size_t", "ssize_t", "_Bool", "bool"}
AGG_FUNCTIONS = ("count", "sum", "min", "max", "avg", "quantize", "lquantize")
PRECEDENCE = [("||",), ("^^",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", "<=", ">", ">="), ("<<", ">>"),
              ("+", "-"), ("*", "/", "%")]


class Lexer:
    """Tokens on demand: a probe description where a clause starts, C tokens elsewhere."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _skip(self) -> None:
        t = self.text
        while self.pos < len(t):
            c = t[self.pos]
            if c in " \t\r\f\v":
                self.pos += 1
            elif t.startswith("/*", self.pos):
                end = t.find("*/", self.pos + 2)
                if end < 0:
                    raise ParseError("a comment is not closed (*/)", self.pos)
                self.pos = end + 2
            else:
                return

    def probe(self) -> Token:
        self._skip()
        m = _PROBE.match(self.text, self.pos)
        if not m:
            return self.next()
        self.pos = m.end()
        return Token("probe", m.group(), m.start())

    def next(self) -> Token:
        self._skip()
        t, at = self.text, self.pos
        if at >= len(t):
            return Token("end", "", at)
        c = t[at]
        if c == "\n":
            self.pos += 1
            return Token("newline", "\n", at)
        if c.isdigit():
            m = _NUMBER.match(t, at)
            end = m.end() if m else at
            if m is None or (end < len(t) and (t[end].isalnum() or t[end] == "_")):
                bad = re.match(r"[0-9A-Za-z_]+", t[at:]).group()
                raise ParseError(f"{bad!r} is not an integer constant", at)
            digits, suffix = m.groups()
            hexa = digits[:2].lower() == "0x"
            significant = (digits[2:] if hexa else digits).lstrip("0")
            shown = m.group() if len(m.group()) <= 24 else f"{m.group()[:20]}... ({len(significant)} digits)"
            if suffix.lower() not in ("", "u", "l", "ul", "lu", "ll", "ull", "llu"):
                raise ParseError(f"{shown!r} has an integer suffix C does not know", at)
            if len(significant) > DIGITS_64:  # before int(): Python refuses decimals past 4,300 digits
                raise ParseError(f"{shown!r} does not fit in 64 bits", at)
            value = int(digits, 16) if hexa else int(digits, 8) if digits.startswith("0") else int(digits)
            if value >= 1 << 64:
                raise ParseError(f"{shown!r} does not fit in 64 bits", at)
            self.pos = end
            return Token("int", m.group(), at, (value, "u" in suffix.lower()))
        if c == '"':
            return self._string(at)
        m = _IDENT.match(t, at)
        if m:
            self.pos = m.end()
            return Token("ident", m.group(), at)
        for p in _PUNCT:
            if t.startswith(p, at):
                self.pos = at + len(p)
                return Token("punct", p, at)
        raise ParseError(f"unexpected character {c!r}", at)

    def _string(self, at: int) -> Token:
        t, i, out = self.text, at + 1, bytearray()
        while True:
            if i >= len(t) or t[i] == "\n":
                raise ParseError("a string constant is not closed (\")", at)
            c = t[i]
            if c == '"':
                break
            if c == "\\":
                e = t[i + 1:i + 2]
                if e in _ESCAPES:
                    out.append(_ESCAPES[e])
                    i += 2
                    continue
                m = re.match(r"x([0-9A-Fa-f]{1,2})", t[i + 1:])
                if not m:
                    raise ParseError(f"unknown escape \\{e} in a string constant", i)
                out.append(int(m.group(1), 16))
                i += 1 + m.end()
                continue
            out += c.encode()
            i += 1
        self.pos = i + 1
        return Token("str", t[at:i + 1], at, bytes(out))

    def slash_ends_predicate(self, slash: Token) -> bool:
        """DTrace's lookahead: this '/' closes the predicate when what follows it is an end of a clause or an
        action (the end, a newline, ';', '{', '@', '/'); otherwise it divides."""
        rest = self.text[slash.at + 1:].lstrip(" \t\r\f\v")
        return not rest or rest[0] in "\n;{@/"


class Parser:
    def __init__(self, text: str) -> None:
        if len(text) > MAX_TEXT:
            raise ParseError(f"the script is {len(text)} characters long, more than {MAX_TEXT}", 0)
        self.lex = Lexer(text)
        self.text = text
        self.tok = self.lex.next()
        self.depth = 0
        self.in_predicate = False

    # -- tokens --------------------------------------------------------------------------------------
    def advance(self) -> Token:
        tok = self.tok
        self.tok = self.lex.next()
        return tok

    def is_(self, text: str) -> bool:
        return self.tok.kind == "punct" and self.tok.text == text

    def expect(self, text: str, what: str) -> Token:
        if not self.is_(text):
            raise ParseError(f"expected {text!r} {what}, found {self.describe(self.tok)}", self.tok.at)
        return self.advance()

    def skip_newlines(self) -> None:
        while self.tok.kind == "newline":
            self.advance()

    @staticmethod
    def describe(tok: Token) -> str:
        return {"end": "the end of the script", "newline": "the end of the line"}.get(tok.kind, repr(tok.text))

    # -- clauses ------------------------------------------------------------------------------------------
    def script(self) -> list[Clause]:
        clauses: list[Clause] = []
        self._separators()
        while self.tok.kind != "end":
            clauses.append(self.clause(len(clauses) + 1))
            if self.tok.kind not in ("end", "newline") and not self.is_(";"):
                raise ParseError(f"expected the end of the clause (a newline or ';'), found "
                                 f"{self.describe(self.tok)}", self.tok.at)
            self._separators()
        if not clauses:
            raise ParseError("the script has no clause (provider:module:function:name ...)", 0)
        return clauses

    def _separators(self) -> None:
        while self.tok.kind == "newline" or self.is_(";"):
            self.advance()

    def clause(self, number: int) -> Clause:
        start = self.tok.at
        self.lex.pos = start  # a clause starts with a probe description: lex it as one
        specs = [self._probe()]
        while self.is_(","):
            self.advance()
            self.skip_newlines()
            self.lex.pos = self.tok.at
            specs.append(self._probe())
        self._continue_on("/", "{", "@")
        predicate = None
        if self.is_("/"):
            self.advance()
            self.in_predicate = True
            predicate = self.expression()
            self.in_predicate = False
            self.skip_newlines()
            self.expect("/", "at the end of the predicate")
            self._continue_on("{", "@")
        actions: list[Aggregation] = []
        snapshot = False
        if self.is_("@"):
            actions.append(self.aggregation())
        elif self.is_("{"):
            self.advance()
            self._separators()
            while not self.is_("}"):
                if self.tok.kind == "end":
                    raise ParseError("a clause's '{' is not closed ('}')", start)
                if self.tok.kind == "ident" and self.tok.text == "snapshot":
                    snapshot = self._snapshot() or snapshot
                else:
                    actions.append(self.aggregation())
                if not self.is_("}") and not self.is_(";") and self.tok.kind != "newline":
                    raise ParseError(f"expected ';' or '}}' after an action, found {self.describe(self.tok)}",
                                     self.tok.at)
                self._separators()
            self.advance()
        text = " ".join(self.text[start:self.tok.at].split())
        return Clause(number, text, tuple(specs), predicate, tuple(actions), record=not actions and not snapshot,
                      snapshot=snapshot)

    def _snapshot(self) -> bool:
        """snapshot(): the session the program runs in snapshotted (sdt_snapshot), a firing that passes."""
        self.advance()
        self.expect("(", "after snapshot")
        self.skip_newlines()
        self.expect(")", "after snapshot( (it takes no argument)")
        return True

    def _continue_on(self, *texts: str) -> None:
        """A clause goes on over newlines when what follows them is its next part (DTrace's layout: the predicate
        and the actions on lines of their own); otherwise the newline ends it."""
        if self.tok.kind != "newline":
            return
        saved = (self.tok, self.lex.pos)
        self.skip_newlines()
        if not any(self.is_(t) for t in texts):
            self.tok, self.lex.pos = saved

    def _probe(self) -> str:
        tok = self.lex.probe()
        if tok.kind != "probe":
            raise ParseError(f"expected a probe description (provider:module:function:name), found "
                             f"{self.describe(tok)}", tok.at)
        self.tok = self.lex.next()
        return tok.text

    def aggregation(self) -> Aggregation:
        if self.tok.kind == "ident":  # DTrace's other actions (trace(), printf(), self->x = ...)
            self.unsupported(self.tok)
        at = self.expect("@", "to start an aggregation").at
        name = ""
        if self.tok.kind == "ident" and self.tok.at == at + 1:
            name = self.advance().text
        keys: list[Node] = []
        if self.is_("["):
            self.advance()
            keys.append(self.expression())
            while self.is_(","):
                self.advance()
                keys.append(self.expression())
            self.skip_newlines()
            self.expect("]", "after the aggregation's keys")
        self.expect("=", "after the aggregation" + (f" @{name}" if name else ""))
        if self.tok.kind != "ident":
            raise ParseError(f"expected an aggregating function ({', '.join(AGG_FUNCTIONS)}), found "
                             f"{self.describe(self.tok)}", self.tok.at)
        func = self.advance()
        if func.text not in AGG_FUNCTIONS:
            raise ParseError(f"{func.text}() is not an aggregating function: use one of {', '.join(AGG_FUNCTIONS)}",
                             func.at)
        self.expect("(", f"after {func.text}")
        args: list[Node] = []
        self.skip_newlines()
        if not self.is_(")"):
            args.append(self.expression())
            while self.is_(","):
                self.advance()
                args.append(self.expression())
        self.skip_newlines()
        self.expect(")", f"after the arguments of {func.text}()")
        return Aggregation(at, name, tuple(keys), func.text, tuple(args))

    # -- expressions ----------------------------------------------------------------------------------------
    def expression(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ParseError(f"the expression nests deeper than {MAX_DEPTH} levels", self.tok.at)
        try:
            self.skip_newlines()
            cond = self._binary(0)
            self.skip_newlines()
            if not self.is_("?"):
                return cond
            self.advance()
            then = self.expression()
            self.skip_newlines()
            self.expect(":", "in a conditional expression (a ? b : c)")
            return Ternary(cond.at, cond, then, self.expression())
        finally:
            self.depth -= 1

    def _binary(self, level: int) -> Node:
        if level == len(PRECEDENCE):
            return self._unary()
        left = self._binary(level + 1)
        depth = 0  # the chain's so far: what tree_depth(left) gives, without walking the chain again each time
        while True:
            self.skip_newlines()
            if self.tok.kind != "punct" or self.tok.text not in PRECEDENCE[level]:
                return left
            if self.tok.text == "/" and self.in_predicate and self.lex.slash_ends_predicate(self.tok):
                return left
            op = self.advance()
            right = self._binary(level + 1)
            depth = max(depth or tree_depth(left), tree_depth(right) + 1)
            left = Binary(left.at, op.text, left, right)
            if depth > MAX_TREE:
                raise ParseError(f"the expression nests more than {MAX_TREE} operations deep", op.at)

    def _unary(self) -> Node:
        self.skip_newlines()
        if self.tok.kind == "punct" and self.tok.text in ("-", "+", "!", "~"):
            op = self.advance()
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ParseError(f"the expression nests deeper than {MAX_DEPTH} levels", op.at)
            try:
                return Unary(op.at, op.text, self._unary())
            finally:
                self.depth -= 1
        return self._primary()

    def _primary(self) -> Node:
        tok = self.tok
        if tok.kind == "int":
            self.advance()
            value, unsigned = tok.value
            return Int(tok.at, value, unsigned or value > (1 << 63) - 1)
        if tok.kind == "str":
            self.advance()
            return Str(tok.at, tok.value)
        if tok.kind == "ident":
            self.unsupported(tok)
            self.advance()
            return Var(tok.at, tok.text)
        if self.is_("("):
            self.advance()
            self.skip_newlines()
            if self.tok.kind == "ident" and self.tok.text in TYPE_WORDS:
                words = []
                while (self.tok.kind == "ident" and self.tok.text in TYPE_WORDS) or self.is_("*"):
                    words.append(self.advance().text)
                self.expect(")", "after the type of a cast")
                outer, self.depth = self.depth, self.depth + 1
                try:
                    return Cast(tok.at, " ".join(words), self._unary())
                finally:
                    self.depth = outer
            saved, self.in_predicate = self.in_predicate, False  # a '/' inside parentheses divides
            inner = self.expression()
            self.in_predicate = saved
            self.skip_newlines()
            self.expect(")", "to close '('")
            return inner
        raise ParseError(f"expected an expression, found {self.describe(tok)}", tok.at)


    def unsupported(self, tok: Token) -> None:
        """A ParseError naming the DTrace construct ``tok`` starts, when the kernel's programs do not have it."""
        rest = self.text[tok.at + len(tok.text):].lstrip(" \t")
        if tok.text == "args" and rest.startswith("["):
            raise ParseError(ARGS[0], tok.at, ARGS[1])
        if tok.text in ("self", "this") and rest.startswith("->"):
            raise ParseError(SELF[0], tok.at, SELF[1])
        if rest.startswith("("):
            name = tok.text
            if name in FUNCTIONS:
                raise ParseError(FUNCTIONS[name][0], tok.at, FUNCTIONS[name][1])
            if name in AGG_FUNCTIONS:
                raise ParseError(f"{name}() aggregates: it is an aggregation's value, not an expression", tok.at,
                                 f"write @name[keys] = {name}(...)")
            raise ParseError(f"{name}() is not supported: an expression calls no function", tok.at,
                             "use operators, casts and the variables arg0..arg5, cpu and the probe's names")


def tree_depth(node: Node) -> int:
    """Levels of ``node``'s tree the compiler recurses through, counted without recursing: a binary operation's
    left operand is on its own level (the compiler walks a flat chain a || b || c ... in a loop), every other
    operand one level down."""
    deepest, todo = 0, [(node, 1)]
    while todo:
        n, d = todo.pop()
        deepest = max(deepest, d)
        if d > MAX_TREE:
            break
        if isinstance(n, Binary):
            todo += [(n.left, d), (n.right, d + 1)]
        else:
            todo += [(c, d + 1) for c in children(n)]
    return deepest


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Unary | Cast):
        return (node.operand,)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Ternary):
        return (node.cond, node.then, node.other)
    return ()


def parse(text: str) -> list[Clause]:
    """The clauses of ``text``; ParseError at the first thing that is not the language."""
    return Parser(text).script()
