"""The differential call tree: two call trees merged into one, time per repeat on each side.

One model for both comparisons: ``explain`` (the fast repeats of a run against its slow ones) and ``diff`` (run
A against run B). Side A is the baseline (run A; the fast repeats), side B the one compared with it (run B; the
slow repeats), so a node's ``delta_ns`` (B - A) is the extra time. ``diff_tree`` merges two ``CallNode`` trees as
they are (children by function); ``flame_diff`` merges them by function name first (``by_name``: the same
function under the same caller once, whatever its file), as ``diff`` compares two runs whose functions are
numbered apart. ``output/terminal/difftree.py`` draws it in the terminal, ``output/html/difftree.py`` colours it on the pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .calltree import CallNode


@dataclass(slots=True)
class DiffNode:
    """A node of the differential call tree: its function's ``name``, time per repeat (ns) on side A (``a_ns``: run
    A, the fast repeats) and side B (``b_ns``: run B, the slow repeats), children in the order the builder sorts."""

    name: str
    a_ns: float
    b_ns: float
    children: list["DiffNode"] = field(default_factory=list)

    @property
    def delta_ns(self) -> float:
        """B minus A (ns per repeat): the extra time on side B (negative: less)."""
        return self.b_ns - self.a_ns

    def to_dict(self, keys: dict[str, str] | None = None) -> dict:
        """``{"name", "a_ns", "b_ns", "children": [...]}`` as ``dataclasses.asdict`` makes it; ``keys``: other
        names for the two times, in the order given (``explain``'s JSON: ``{"b_ns": "slow_ns", "a_ns":
        "fast_ns"}``)."""
        keys = keys or {"a_ns": "a_ns", "b_ns": "b_ns"}
        out: dict = {"name": self.name}
        for k, name in keys.items():
            out[name] = getattr(self, k)
        out["children"] = [c.to_dict(keys) for c in self.children]
        return out


#: ``diff_tree``'s orders of a node's children: the widest on either side first, or the widest on side B first
ORDERS = {"widest": lambda n: -max(n.a_ns, n.b_ns), "b": lambda n: -n.b_ns}


def diff_tree(a: CallNode, n_a: int, b: CallNode, n_b: int, min_share: float = 0.005, order: str = "widest") -> DiffNode:
    """Merge call trees ``a`` (side A, ``n_a`` repeats) and ``b`` (side B, ``n_b`` repeats) into a differential
    tree (ns per repeat), children matched by their key in ``CallNode.children``; drops nodes under ``min_share``
    of the larger root on both sides. ``order``: a key of ``ORDERS``. The root is named "all"."""
    limit = min_share * max(a.total_ns / max(n_a, 1), b.total_ns / max(n_b, 1))
    sort_key = ORDERS[order]

    def merge(ca: CallNode | None, cb: CallNode | None, name: str) -> DiffNode:
        node = DiffNode(name, (ca.total_ns / n_a) if ca else 0.0, (cb.total_ns / n_b) if cb else 0.0)
        for k in set(cb.children if cb else ()) | set(ca.children if ca else ()):  # (B's first: ties keep their order)
            xa = ca.children.get(k) if ca else None
            xb = cb.children.get(k) if cb else None
            if max(xa.total_ns / n_a if xa else 0.0, xb.total_ns / n_b if xb else 0.0) < limit:
                continue
            node.children.append(merge(xa, xb, (xa or xb).name))
        node.children.sort(key=sort_key)
        return node

    return merge(a, b, "all")


def by_name(node: CallNode) -> CallNode:
    """``node``'s tree with the children of each node merged by function name (their total times added, their
    children merged the same way), keyed by name. Only ``total_ns`` is kept; ``function`` is the first merged."""
    out = CallNode(node.function, node.name, node.total_ns)
    for c in node.children.values():
        e = out.children.setdefault(c.name, CallNode(c.function, c.name))
        e.total_ns += c.total_ns
        for k, v in by_name(c).children.items():
            _merge_into(e.children.setdefault(k, CallNode(v.function, k)), v)
    return out


def _merge_into(dst: CallNode, src: CallNode) -> None:
    dst.total_ns += src.total_ns
    for k, v in src.children.items():
        _merge_into(dst.children.setdefault(k, CallNode(v.function, k)), v)


def flame_diff(tree_a: CallNode, n_a: int, tree_b: CallNode, n_b: int, min_share: float = 0.002) -> DiffNode:
    """Merge two call trees by function name (``by_name``) into a differential flame graph, ns per repeat, the
    widest children first; nodes under ``min_share`` of the larger root in both runs are dropped."""
    return diff_tree(by_name(tree_a), n_a, by_name(tree_b), n_b, min_share, "widest")
