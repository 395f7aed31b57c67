"""C expressions for the emitter of CUDA and HIP source (:mod:`.cemit`): identifiers, literals, operators, casts and
math calls, printed so that the compiled code computes what the interpreters do (integers wrapping in their type,
floor division and modulo, each float rounding once), with the names of :class:`~.cemit.CTable`."""

from __future__ import annotations

import math
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

from tilec import dtypes as dt
from tilec.dtypes import DType
from tilec.errors import TilecError
from tilec.ir.expr import BinOp, Call, Cast, Const, Expr, Select, Table, UnOp, Var
from tilec.ir.printer import Names
from tilec.lower.tir import Bits, MemRef, TCall

if TYPE_CHECKING:
    from tilec.backends.cemit import CTable

MATH32 = {
    "exp": "expf", "exp2": "exp2f", "log": "logf", "log2": "log2f", "sqrt": "sqrtf", "rsqrt": "rsqrtf",
    "abs": "fabsf", "tanh": "tanhf", "sin": "sinf", "cos": "cosf", "floor": "floorf", "ceil": "ceilf",
    "round": "roundf", "pow": "powf", "fma": "fmaf", "isnan": "isnan", "isinf": "isinf",
    "sigmoid": "tl::sigmoid",
}  # fmt: skip
MATH64 = {k: v.rstrip("f") if v.endswith("f") and k not in ("isnan", "isinf") else v for k, v in MATH32.items()}
MATH64.update({"rsqrt": "rsqrt", "abs": "fabs", "sigmoid": "tl::sigmoid"})

# |a| of a signed int as the interpreters compute it: the type's minimum is its own magnitude (it wraps), where C's
# abs of it is undefined (a compiler may take abs(x) >= 0 for granted)
_IABS = ("template <class T> __device__ __forceinline__ T iabs(T a) {\n"
         "  return a < T(0) ? static_cast<T>(0ull - static_cast<unsigned long long>(a)) : a;\n}\n")

_C_OPS = {"+": "+", "-": "-", "*": "*", "/": "/", "&": "&", "|": "|", "^": "^", "<<": "<<", ">>": ">>",
          "<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "==", "!=": "!=", "and": "&&", "or": "||"}
# integer ops whose result C's promotion to int can take outside an 8- or 16-bit operand type (the IR's result
# type is the operands'): the interpreters wrap it, so the C wraps it too before anything else reads it
_WIDENING = ("+", "-", "*", "<<")
_PREC = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, "<=": 7, ">": 7, ">=": 7,
         "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}


def ident(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else "v_" + out


class CNames(Names):
    """Unique C identifiers (Python names, with C keywords and clashes renamed)."""

    RESERVED = {"int", "float", "double", "char", "short", "long", "half", "bool", "if", "else", "for", "while",
                "do", "return", "const", "static", "void", "signed", "unsigned", "auto", "default", "case",
                "switch", "break", "continue", "goto", "struct", "union", "enum", "register", "volatile", "new",
                "delete", "this", "class", "template", "typename", "namespace", "tl", "smem", "threadIdx",
                "blockIdx", "blockDim", "gridDim", "min", "max", "abs", "printf"}

    def __init__(self) -> None:
        super().__init__()
        self._used |= self.RESERVED

    def __call__(self, node: Any) -> str:
        key = id(node)
        if key not in self._by_id:
            saved = node.name
            base = ident(saved)
            name, k = base, 0
            while name in self._used:
                k += 1
                name = f"{base}_{k}"
            self._used.add(name)
            self._by_id[key] = name
        return self._by_id[key]


def _literal_value(v: float, d: DType) -> float:
    """The value printed for a float constant ``v`` of type ``d`` (``float``, or a 16-bit type's constructor from
    ``float``): ``v``, unless the compiler would round it differently from the interpreters (numpy's one rounding
    to ``d``): ``v`` halfway between two floats (the literal's shortest decimal lies to one side: 1 + 2**-24 parsed
    as 1 + 2**-23, not 1) or a 16-bit value whose rounding through float differs. Then ``v`` rounded to ``d``."""
    if d is dt.float64:
        return v
    if d.bits == 8:  # the constructor takes a float: print the value already rounded (and saturated) from v
        import ml_dtypes

        top = float(ml_dtypes.finfo(d.np).max)
        return float(np.asarray(min(max(v, -top), top)).astype(d.np))
    with np.errstate(over="ignore"):  # beyond the type's range: inf, as interpreted (numpy warned of it)
        f = np.float32(v)
        other = np.nextafter(f, np.float32(np.inf if v > float(f) else -np.inf))
        x = np.asarray(v)
        rounded = float((dt.float32_to_odd(x) if d is dt.bfloat16 else x).astype(d.np))  # as the interpreters round
        tie = float(f) != v and (float(f) + float(other)) / 2 == v
        return rounded if tie or rounded != float(np.asarray(f).astype(d.np)) else v


class CExprEmitter:
    """Prints thread-IR expressions with a :class:`~.cemit.CTable`; :class:`~.cemit.CEmitter` adds the statements."""

    def __init__(self, table: CTable, nonneg: set[int] | None = None) -> None:
        self.t = table
        self.names = CNames()
        self.nonneg: set[int] = set(nonneg or ())  # ids of the variables known to be >= 0
        self.helpers: dict[str, str] = {}  # name -> device function text, printed after the header

    # ------------------------------------------------------------------------------------------------ types

    def ctype(self, d: DType, of: str = "") -> str:
        name = self.t.types.get(d.name)
        if name is None:
            where = f" (of {of})" if of else ""
            raise TilecError(f"dtype {d}{where} is not supported by the {self.t.name} backend; supported: "
                             + ", ".join(self.t.types))
        return name

    def helper(self, name: str, text: str) -> str:
        """The name of device function ``tl::name`` (``text``: its definition), printed once after the header."""
        if name not in self.helpers:
            self.helpers[name] = f"namespace tl {{\n{text}}}  // namespace tl\n"
        return f"tl::{name}"

    # ------------------------------------------------------------------------------------------ expressions

    def is_nonneg(self, e: Any) -> bool:
        if getattr(e, "dtype", None) is not None and e.dtype.kind == "uint":  # C's / and % are floor's on them
            return True
        if isinstance(e, Const):
            return e.value >= 0
        if isinstance(e, Var):
            return id(e) in self.nonneg
        if isinstance(e, BinOp) and e.op in ("+", "*") and e.dtype.bits < 32:
            return False  # an 8- or 16-bit sum or product wraps in its type (as interpreted): 100 + 100 is -56
        if isinstance(e, BinOp) and e.op in ("+", "*", "//", "%", "min", "max", "&", ">>"):
            return self.is_nonneg(e.a) and self.is_nonneg(e.b)
        if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
            if e.dtype.bits < e.value.dtype.bits or e.value.dtype.kind == "uint" and e.dtype.bits == e.value.dtype.bits:
                return False  # narrowed, or an unsigned value of the top bit set: it may wrap negative
            return self.is_nonneg(e.value)
        if isinstance(e, Table):
            return min(e.values) >= 0
        return False

    def table(self, x: Table) -> str:
        """The name of a constant-memory array holding ``x``'s entries (declared once, among the helpers)."""
        name = f"tl_table{len(x.values)}_{zlib.crc32(str(x.values).encode()):08x}"
        if name not in self.helpers:
            rows = [", ".join(str(v) for v in x.values[i:i + 24]) for i in range(0, len(x.values), 24)]
            self.helpers[name] = (f"{self.t.constant} {self.ctype(x.dtype)} {name}[{len(x.values)}] = {{\n  "
                                  + ",\n  ".join(rows) + "};")
        return name

    def e(self, x: Any, prec: int = 0) -> str:  # noqa: C901
        if isinstance(x, Const):
            return self.const(x)
        if isinstance(x, Var):
            return self.names(x)
        if isinstance(x, MemRef) and x.hint is not None:
            from tilec.backends.cuda import cache_hints

            return cache_hints.load(self, self.ctype(x.mem.dtype), f"&{self.names(x.mem)}[{self.e(x.offset)}]", x.hint)
        if isinstance(x, MemRef):
            return f"{self.names(x.mem)}[{self.e(x.offset)}]"
        if isinstance(x, BinOp):
            return self.binop(x, prec)
        if isinstance(x, UnOp):
            op = {"-": "-", "~": "~", "not": "!"}[x.op]
            if op == "~" and x.a.dtype.is_bool:
                op = "!"  # C's ~ promotes a bool to int (~true is -2, nonzero); the interpreters' ~ of a bool is not
            if op != "!" and x.dtype.is_int and x.dtype.bits < 32:  # -(-128) and ~(uint8)0 leave the type in C
                return f"static_cast<{self.ctype(x.dtype)}>({op}{self.e(x.a, 11)})"
            if x.dtype.is_float and x.dtype.bits == 8:  # no unary minus on fp8 types: in float
                return f"{self.ctype(x.dtype)}(-static_cast<float>({self.e(x.a)}))"
            return f"({op}{self.e(x.a, 11)})"
        if isinstance(x, Cast):
            return self.cast(x.dtype, x.value)
        if isinstance(x, Select):
            return f"({self.e(x.cond, 1)} ? {self.e(x.a, 1)} : {self.e(x.b, 1)})"
        if isinstance(x, Table):
            return f"{self.table(x)}[{self.e(x.index)}]"
        if isinstance(x, Call):
            return self.call(x)
        if isinstance(x, Bits):
            narrow = self.ctype(x.values[0].dtype)
            vals = ", ".join(self.e(v) for v in x.values)
            return f"tl::bits<{self.ctype(x.dtype)}>(tl::Vec<{narrow}, {len(x.values)}>{{{{{vals}}}}})"
        if isinstance(x, TCall):
            if x.name in self.t.intrinsic_helpers:
                self.helper(*self.t.intrinsic_helpers[x.name])
            fmt = self.t.intrinsics[x.name]
            if len(x.args) == 1:
                return fmt.format(v=self.e(x.args[0]))
            w = self.e(x.args[2]) if len(x.args) > 2 else str(self.t.warp_size)
            text = fmt.format(v=self.e(x.args[0]), a=self.e(x.args[1]), w=w)
            if (x.dtype.is_int or x.dtype.is_bool) and x.dtype.bits < 32:  # shuffled as an int: back to the type
                return f"static_cast<{self.ctype(x.dtype)}>({text})"  # (tl::max(signed char, int) has no match)
            return text
        raise TypeError(f"cannot emit {type(x).__name__}")

    def const(self, c: Const) -> str:
        v = c.value
        if c.dtype.is_bool:
            return "true" if v else "false"
        if c.dtype.is_int:
            v = int(v)
            if c.dtype.kind == "uint":  # unsigned literals (a signed one >= 2**63, or long for >= 2**31, is not; an
                # int 1 beside an unsigned matched no template: tl::atomic_add(unsigned*, int))
                return f"{v}ull" if c.dtype.bits == 64 else (f"{v}u" if c.dtype.bits == 32 else str(v))
            bits = 64 if c.dtype.bits == 64 else 32
            suffix = "LL" if bits == 64 else ""
            if v == -(1 << (bits - 1)):  # -2**63 as a literal is -(2**63), whose 2**63 C takes as unsigned (and
                return f"({v + 1}{suffix} - 1)"  # -2**31's 2**31 as a long): the type's minimum by arithmetic
            return f"{v}{suffix}" if v >= 0 or bits == 64 else f"({v})"
        if math.isinf(v):
            text = "INFINITY" if v > 0 else "(-INFINITY)"
        elif math.isnan(v):
            text = "NAN"
        else:
            text = repr(_literal_value(float(v), c.dtype)) + ("" if c.dtype is dt.float64 else "f")
        if c.dtype is dt.float64 and not math.isfinite(v):  # INFINITY and NAN are floats: tl::max(double, float)
            return f"static_cast<double>({text})"  # matched no template
        if c.dtype in (dt.float32, dt.float64):
            return text
        return f"{self.ctype(c.dtype)}({text})"

    def binop(self, x: BinOp, prec: int) -> str:
        if x.op in ("min", "max"):
            fn = {"min": "tl::min", "max": "tl::max"}[x.op]
            if x.dtype.is_float and x.dtype.bits < 32:  # fminf / fmaxf, NaN skipped (the template's a < b ? b : a
                return f"{self.ctype(x.dtype)}({fn}(static_cast<float>({self.e(x.a)}), " \
                       f"static_cast<float>({self.e(x.b)})))"  # kept a NaN first operand only)
            if not x.dtype.is_float and (x.dtype.bits < 32 or x.dtype.kind == "uint"):  # C types an int literal, and a
                fn += f"<{self.ctype(x.dtype)}>"  # narrow int's sum or quotient, int: the template's type is named
            return f"{fn}({self.e(x.a)}, {self.e(x.b)})"
        if x.op in ("//", "%"):
            if x.a.dtype.is_int:
                if self.is_nonneg(x.a) and self.is_nonneg(x.b):
                    op = "/" if x.op == "//" else "%"
                    text = f"{self.e(x.a, 10)} {op} {self.e(x.b, 11)}"
                    return f"({text})" if prec > 10 else text
                fn = "tl::floordiv" if x.op == "//" else "tl::floormod"
                text = f"{fn}({self.e(x.a)}, {self.e(x.b)})"  # in int: int8 -128 // -1 wraps, as interpreted
                return f"static_cast<{self.ctype(x.dtype)}>({text})" if x.dtype.bits < 32 else text
            fn = "tl::ffloordiv" if x.op == "//" else "tl::ffloormod"  # float and double overloads
            if x.a.dtype.bits < 32:  # computed in float, the result rounded to the operands' type
                return f"{self.ctype(x.dtype)}({fn}(static_cast<float>({self.e(x.a)}), " \
                       f"static_cast<float>({self.e(x.b)})))"
            return f"{fn}({self.e(x.a)}, {self.e(x.b)})"
        if x.op == "/" and x.dtype is dt.float32 and not (isinstance(x.a, Const) and x.a.value == 1):
            # times the correctly rounded reciprocal (within 1.5 ulp of the quotient): the reciprocal of a divisor
            # that an unrolled loop repeats (a row's sum in a softmax, flash attention's epilogue) is computed once
            text = f"{self.e(x.a, 10)} * (1.0f / {self.e(x.b, 11)})"
            return f"({text})" if prec > 10 else text
        if x.op in ("<<", ">>") and not (isinstance(x.b, Const) and 0 <= x.b.value < x.dtype.bits):
            fn = "tl::shl" if x.op == "<<" else "tl::shr"  # a count out of range shifts every bit out, as interpreted
            return f"{fn}<{self.ctype(x.dtype)}>({self.e(x.a)}, {self.e(x.b)})"
        op = _C_OPS[x.op]
        p = _PREC[op]
        if x.a.dtype.is_float and x.a.dtype.bits == 8:  # fp8 types have no arithmetic or comparison operators:
            text = f"static_cast<float>({self.e(x.a)}) {op} static_cast<float>({self.e(x.b)})"  # in float, as
            return f"{self.ctype(x.dtype)}({text})" if x.dtype.is_float else f"({text})"  # interpreted
        text = f"{self.e(x.a, p)} {op} {self.e(x.b, p + 1)}"
        if x.op in _WIDENING and x.dtype.is_int and x.dtype.bits < 32:  # C computes it in int: wrap to the type
            if x.op in ("*", "<<"):  # in unsigned: 65535 * 65535 or a shift past int's top would overflow int (UB)
                text = f"static_cast<unsigned>({self.e(x.a, 0)}) {op} {self.e(x.b, p + 1)}"
            return f"static_cast<{self.ctype(x.dtype)}>({text})"
        return f"({text})" if p < prec else text

    def cast(self, to: DType, value: Expr) -> str:
        src = value.dtype
        inner = self.e(value)
        low = lambda d: d.is_float and d.bits < 32  # noqa: E731
        if src.is_float and to.is_int and self.t.float_to_int:
            return self.t.float_to_int.format(t=self.ctype(to), v=f"static_cast<float>({inner})" if low(src) else inner)
        if low(src) and (to.is_int or to.is_bool):
            return f"static_cast<{self.ctype(to)}>(static_cast<float>({inner}))"
        if to is dt.bfloat16 and (src is dt.float64 or not src.is_float):  # the header's, rounded once (through
            # float, an int over 2^24 or a double would round twice; float16's and float8's ranges end below 2^24)
            return f"tl::bf16_rn(static_cast<double>({inner}))"
        if low(to) and not src.is_float:
            return f"{self.ctype(to)}(static_cast<float>({inner}))"
        if low(src) and low(to):
            return f"{self.ctype(to)}(static_cast<float>({inner}))"
        return f"static_cast<{self.ctype(to)}>({inner})"

    def call(self, x: Call) -> str:
        d = x.args[0].dtype
        if d is dt.float64:
            fn = self.t.math64[x.name]
        elif d.is_int and x.name == "abs":
            if d.kind == "uint":  # no abs overload takes an unsigned value (ambiguous): it is its own magnitude
                return self.e(x.args[0])
            text = f"abs({self.e(x.args[0])})"  # an int: abs(-128) of an int8 wraps to -128, as interpreted
            if d.bits >= 32:  # C's abs of INT_MIN is undefined: tl::iabs wraps it as interpreted
                return f"{self.helper('iabs', _IABS)}({self.e(x.args[0])})"
            return f"static_cast<{self.ctype(d)}>({text})"
        else:
            fn = self.t.math32[x.name]
        args = ", ".join(self.e(a) if d in (dt.float32, dt.float64) else f"static_cast<float>({self.e(a)})"
                         for a in x.args)
        text = f"{fn}({args})"
        if x.dtype.is_float and x.dtype.bits < 32:
            return f"{self.ctype(x.dtype)}({text})"
        return text
