"""Where a module can be broken: a libcst visitor that lists mutation sites inside functions and classes.

A site is (technique, qualified name, line span, old node, new node): replacing ``old`` by ``new`` in the tree
gives the buggy module. The visitor only proposes; ``mutations.py`` applies, renders, checks and deduplicates.

What is never touched, and why:
- module-level code and class bodies outside methods: it runs at import, so a bug there breaks collection of
  every test at once (no PASS_TO_PASS left), which is not a task;
- type annotations (``str | None`` -> ``str / None`` changes nothing at run time), decorators (import time),
  docstrings and other bare string statements (no behaviour);
- large literal containers, which are data tables, not logic.
"""

from __future__ import annotations

import ast
import dataclasses
import random
from collections.abc import Sequence

import libcst as cst
from libcst.metadata import PositionProvider

# A literal container with more elements than this is treated as a data table and left alone.
MAX_LITERAL_ELEMENTS = 16

# Operator replacements, SWE-smith style: each maps to one plausible mistake.
BINARY_OPS: dict[type, type] = {
    cst.Add: cst.Subtract,
    cst.Subtract: cst.Add,
    cst.Multiply: cst.Divide,
    cst.Divide: cst.Multiply,
    cst.FloorDivide: cst.Divide,
    cst.Modulo: cst.FloorDivide,
    cst.Power: cst.Multiply,
    cst.LeftShift: cst.RightShift,
    cst.RightShift: cst.LeftShift,
    cst.BitAnd: cst.BitOr,
    cst.BitOr: cst.BitAnd,
    cst.BitXor: cst.BitOr,
}
AUGMENTED_OPS: dict[type, type] = {
    cst.AddAssign: cst.SubtractAssign,
    cst.SubtractAssign: cst.AddAssign,
    cst.MultiplyAssign: cst.DivideAssign,
    cst.DivideAssign: cst.MultiplyAssign,
    cst.FloorDivideAssign: cst.DivideAssign,
    cst.ModuloAssign: cst.FloorDivideAssign,
    cst.BitOrAssign: cst.BitAndAssign,
    cst.BitAndAssign: cst.BitOrAssign,
    cst.LeftShiftAssign: cst.RightShiftAssign,
    cst.RightShiftAssign: cst.LeftShiftAssign,
}
BOOLEAN_OPS: dict[type, type] = {cst.And: cst.Or, cst.Or: cst.And}
COMPARISON_OPS: dict[type, type] = {
    cst.LessThan: cst.LessThanEqual,
    cst.LessThanEqual: cst.LessThan,
    cst.GreaterThan: cst.GreaterThanEqual,
    cst.GreaterThanEqual: cst.GreaterThan,
    cst.Equal: cst.NotEqual,
    cst.NotEqual: cst.Equal,
    cst.Is: cst.IsNot,
    cst.IsNot: cst.Is,
    cst.In: cst.NotIn,
    cst.NotIn: cst.In,
}
# Swapping the operands of these changes nothing for the values they usually see, so it is not proposed.
COMMUTATIVE_OPS = (
    cst.Multiply,
    cst.BitAnd,
    cst.BitOr,
    cst.BitXor,
    cst.Equal,
    cst.NotEqual,
    cst.Is,
    cst.IsNot,
)
# Comparisons whose operands may be swapped: ``a < b`` -> ``b < a``.
ORDERED_COMPARISONS = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)


@dataclasses.dataclass(frozen=True)
class Site:
    """One proposed mutation: replace ``old`` by ``new`` in the module tree."""

    technique: str
    qualname: str
    start_line: int
    end_line: int
    old: cst.CSTNode
    new: cst.CSTNode


def swap_operator(op: cst.CSTNode, table: dict[type, type]) -> cst.CSTNode | None:
    """The replacement operator, keeping the spacing the author wrote (``a+b`` stays tight)."""
    target = table.get(type(op))
    if target is None:
        return None
    names = {f.name for f in dataclasses.fields(target)}
    kept = {k: getattr(op, k) for k in ("whitespace_before", "whitespace_after") if k in names and hasattr(op, k)}
    return target(**kept)


def changed_string(node: cst.SimpleString) -> cst.SimpleString | None:
    """A string literal that lost its last character ('' becomes 'x'), in the author's quotes.

    None for triple-quoted strings (messages and templates) and for strings ending in an escape sequence.
    """
    if len(node.quote) == 3:
        return None
    raw = node.raw_value
    if "\\" in raw[-2:]:
        return None
    new_raw = raw[:-1] if raw else "x"
    literal = f"{node.prefix}{node.quote}{new_raw}{node.quote}"
    try:
        ast.literal_eval(literal)
    except (ValueError, SyntaxError):
        return None
    return node.with_changes(value=literal)


def parenthesized(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``expr`` in parentheses when moving it next to another operator could regroup it."""
    compound = (
        cst.BinaryOperation,
        cst.BooleanOperation,
        cst.Comparison,
        cst.UnaryOperation,
        cst.IfExp,
        cst.Lambda,
        cst.NamedExpr,
    )
    if isinstance(expr, compound) and not expr.lpar:
        return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return expr


def block_without(block: cst.BaseSuite, index: int, replacement: Sequence[cst.BaseStatement]) -> cst.BaseSuite:
    """``block`` with statement ``index`` replaced by ``replacement`` (``pass`` if it would be empty)."""
    body = [*block.body[:index], *replacement, *block.body[index + 1 :]]
    if not body:
        body = [cst.SimpleStatementLine([cst.Pass()])]
    return block.with_changes(body=body)


def suite_statements(suite: cst.BaseSuite) -> list[cst.BaseStatement]:
    """The statements of a suite as full lines (a one-line ``with x: a; b`` becomes one line ``a; b``)."""
    if isinstance(suite, cst.IndentedBlock):
        return list(suite.body)
    assert isinstance(suite, cst.SimpleStatementSuite)  # libcst's only other suite: `with x: a; b`
    return [cst.SimpleStatementLine(body=suite.body)]


def is_bare_string(stmt: cst.CSTNode) -> bool:
    """A statement that is only a string (docstrings and string comments)."""
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


class SiteCollector(cst.CSTVisitor):
    """Walks a module once and lists every mutation site (see the module docstring for what is skipped)."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.seed = seed
        self.sites: list[Site] = []
        self._names: list[str] = []
        self._function_depth = 0

    # -- bookkeeping ------------------------------------------------------------------------------------
    def _add(self, technique: str, old: cst.CSTNode, new: cst.CSTNode | None, span: cst.CSTNode | None = None):
        if new is None:
            return
        pos = self.get_metadata(PositionProvider, span or old)
        qualname = ".".join(self._names) or "<module>"
        self.sites.append(Site(technique, qualname, pos.start.line, pos.end.line, old, new))

    @property
    def _in_function(self) -> bool:
        return self._function_depth > 0

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._names.append(node.name.value)
        self._class_sites(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._names.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._names.append(node.name.value)
        self._function_depth += 1
        self._shuffle_site(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._names.pop()
        self._function_depth -= 1

    # Subtrees with no run-time behaviour worth breaking: do not descend.
    def visit_Annotation(self, node: cst.Annotation) -> bool:
        return False

    def visit_Decorator(self, node: cst.Decorator) -> bool:
        return False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return not is_bare_string(node)

    def _is_table(self, elements: Sequence[cst.CSTNode]) -> bool:
        return len(elements) > MAX_LITERAL_ELEMENTS

    def visit_List(self, node: cst.List) -> bool:
        return not self._is_table(node.elements)

    def visit_Tuple(self, node: cst.Tuple) -> bool:
        return not self._is_table(node.elements)

    def visit_Set(self, node: cst.Set) -> bool:
        return not self._is_table(node.elements)

    def visit_Dict(self, node: cst.Dict) -> bool:
        return not self._is_table(node.elements)

    # -- expressions ------------------------------------------------------------------------------------
    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if not self._in_function:
            return
        op = swap_operator(node.operator, BINARY_OPS)
        self._add("change_binary_operator", node, op and node.with_changes(operator=op))
        if not isinstance(node.operator, (*COMMUTATIVE_OPS, cst.MatrixMultiply)):
            swapped = node.with_changes(left=parenthesized(node.right), right=parenthesized(node.left))
            self._add("swap_operands", node, swapped)
        if isinstance(node.left, cst.BinaryOperation) and not node.lpar and not node.left.lpar:
            # (a op1 b) op2 c -> a op2 c: a term of the chain is lost
            self._add("break_chain", node, node.with_changes(left=node.left.left))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if self._in_function:
            op = swap_operator(node.operator, AUGMENTED_OPS)
            self._add("change_augmented_operator", node, op and node.with_changes(operator=op))

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        if self._in_function:
            op = swap_operator(node.operator, BOOLEAN_OPS)
            self._add("change_boolean_operator", node, op and node.with_changes(operator=op))

    def visit_Comparison(self, node: cst.Comparison) -> None:
        if not self._in_function:
            return
        for i, target in enumerate(node.comparisons):
            op = swap_operator(target.operator, COMPARISON_OPS)
            if op is not None:
                comparisons = [
                    *node.comparisons[:i],
                    target.with_changes(operator=op),
                    *node.comparisons[i + 1 :],
                ]
                self._add("change_comparison_operator", node, node.with_changes(comparisons=comparisons))
        if len(node.comparisons) == 1:
            target = node.comparisons[0]
            if isinstance(target.operator, ORDERED_COMPARISONS):
                swapped = node.with_changes(
                    left=parenthesized(target.comparator),
                    comparisons=[target.with_changes(comparator=parenthesized(node.left))],
                )
                self._add("swap_operands", node, swapped)
        else:
            # a < b < c -> a < b: the last bound is no longer checked
            self._add("break_chain", node, node.with_changes(comparisons=node.comparisons[:1]))

    def visit_Integer(self, node: cst.Integer) -> None:
        if self._in_function and node.value.isdigit():
            value = int(node.value)
            self._add("change_constant", node, node.with_changes(value=str(value + 1)))
            if value > 0:
                self._add("change_constant", node, node.with_changes(value=str(value - 1)))

    def visit_Name(self, node: cst.Name) -> None:
        if self._in_function and node.value in ("True", "False"):
            self._add("change_constant", node, node.with_changes(value="False" if node.value == "True" else "True"))

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if self._in_function:
            self._add("change_constant", node, changed_string(node))

    # -- statements -------------------------------------------------------------------------------------
    def visit_If(self, node: cst.If) -> None:
        if self._in_function and isinstance(node.orelse, cst.Else):
            inverted = node.with_changes(body=node.orelse.body, orelse=node.orelse.with_changes(body=node.body))
            self._add("invert_if", node, inverted)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        if not self._in_function:
            return
        for i, stmt in enumerate(node.body):
            if isinstance(stmt, cst.If):
                self._add("remove_conditional", node, block_without(node, i, []), span=stmt)
            elif isinstance(stmt, (cst.For, cst.While)):
                self._add("remove_loop", node, block_without(node, i, []), span=stmt)
            elif isinstance(stmt, (cst.With, cst.Try, cst.TryStar)):
                self._add("remove_wrapper", node, block_without(node, i, suite_statements(stmt.body)), span=stmt)
            elif self._is_assignment(stmt):
                self._add("remove_assignment", node, block_without(node, i, []), span=stmt)

    @staticmethod
    def _is_assignment(stmt: cst.BaseStatement) -> bool:
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            return False
        small = stmt.body[0]
        return isinstance(small, (cst.Assign, cst.AugAssign)) or (
            isinstance(small, cst.AnnAssign) and small.value is not None
        )

    def _shuffle_site(self, node: cst.FunctionDef) -> None:
        if not isinstance(node.body, cst.IndentedBlock):
            return
        body = list(node.body.body)
        head = body[:1] if body and is_bare_string(body[0]) else []
        rest = body[len(head) :]
        codes = [cst.Module([]).code_for_node(s) for s in rest]
        if len(set(codes)) < 2:
            return
        pos = self.get_metadata(PositionProvider, node)
        # str seeds are hashed with sha512 by random.Random, so the order is the same in every process.
        rng = random.Random(f"{self.seed}:{'.'.join(self._names)}:{pos.start.line}")
        order = list(range(len(rest)))
        while [codes[i] for i in order] == codes:
            rng.shuffle(order)
        shuffled = node.body.with_changes(body=[*head, *(rest[i] for i in order)])
        self._add("shuffle_statements", node.body, shuffled, span=node)

    def _class_sites(self, node: cst.ClassDef) -> None:
        for i, base in enumerate(node.bases):
            if isinstance(base.value, cst.Name) and base.value.value == "object":
                continue
            bases = [*node.bases[:i], *node.bases[i + 1 :]]
            if bases:
                bases[-1] = bases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                new = node.with_changes(bases=bases)
            elif node.keywords:
                new = node.with_changes(bases=bases)
            else:
                new = node.with_changes(bases=[], lpar=cst.MaybeSentinel.DEFAULT, rpar=cst.MaybeSentinel.DEFAULT)
            self._add("remove_base_class", node, new, span=base)
        if not isinstance(node.body, cst.IndentedBlock):
            return
        for i, stmt in enumerate(node.body.body):
            if isinstance(stmt, cst.FunctionDef):
                self._names.append(stmt.name.value)
                self._add("remove_method", node.body, block_without(node.body, i, []), span=stmt)
                self._names.pop()
