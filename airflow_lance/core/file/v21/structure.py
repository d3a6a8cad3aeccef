"""Repetition/definition levels <-> validity and offsets of every struct/list layer.

A 2.1+ leaf column stores one (rep, def) pair per *entry*. Layers are listed
innermost first (the leaf item, then its parents); each layer takes 0, 1 or 2
definition values, numbered from the inside out starting at 1 (0 = valid at
every layer): a nullable item/struct takes one (null), a list takes "null",
"empty" or both (null first). Repetition levels count list layers from the
inside (innermost list = 1, outermost = R); an entry with rep ``r`` starts a new
list at every list layer whose number is ``<= r``; rows start at ``rep == R``.

Null and empty lists, and everything below a null struct that lies above a
list, occupy an entry that is *invisible* to the layers below: for each
definition value we know the innermost layer that still has a slot for it.
With that, each layer is computed independently and vectorised:

* entries visible at layer ``j`` that start a slot at ``j`` are those with
  ``rep >= (number of list layers at or inside j)``;
* a slot is valid when its definition value belongs to a layer inside ``j``
  (or is the layer's own "empty list" value); a value of an outer layer means
  the slot is masked by a null ancestor and is null, as pylance reads it;
* list offsets count the slots of the child layer before each list slot.

:func:`levels` does the reverse for the writer: given validity and offsets
per layer (outermost first), it produces the entries' rep/def arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from airflow_lance.core._proto import encodings_v2_1_pb2 as pb
from airflow_lance.core.file.v21.util import Ctx, exclusive_cumsum

ITEM, LIST = "item", "list"
_LIST_LAYERS = (pb.REPDEF_ALL_VALID_LIST, pb.REPDEF_NULLABLE_LIST, pb.REPDEF_EMPTYABLE_LIST,
                pb.REPDEF_NULL_AND_EMPTY_LIST)
_ITEM_LAYERS = (pb.REPDEF_ALL_VALID_ITEM, pb.REPDEF_NULLABLE_ITEM)
_DEF_COUNT = {pb.REPDEF_ALL_VALID_ITEM: 0, pb.REPDEF_ALL_VALID_LIST: 0, pb.REPDEF_NULLABLE_ITEM: 1,
              pb.REPDEF_NULLABLE_LIST: 1, pb.REPDEF_EMPTYABLE_LIST: 1, pb.REPDEF_NULL_AND_EMPTY_LIST: 2}


@dataclass
class Level:
    """One struct/list layer of a page: ``length`` slots, validity, list offsets."""

    length: int
    validity: np.ndarray | None
    offsets: np.ndarray | None = None


@dataclass
class Structure:
    """Everything the levels say: one :class:`Level` per node (outermost first), leaf validity."""

    levels: list[Level]
    leaf_count: int
    leaf_valid: np.ndarray | None


def check_layers(ctx: Ctx, layers: list[int], kinds: list[str]) -> None:
    """The page's layers (innermost first) match the field path (``kinds``, outermost first)."""
    if len(layers) != len(kinds):
        raise ctx.corrupt(f"{len(layers)} rep/def layers for a field path of depth {len(kinds)}")
    for layer, node in zip(reversed(layers), kinds):
        if layer not in (_LIST_LAYERS if node == LIST else _ITEM_LAYERS):
            raise ctx.corrupt(f"rep/def layer {pb.RepDefLayer.Name(layer) if layer in _DEF_COUNT else layer} "
                              f"for a {node} node")


def max_def(layers: list[int]) -> int:
    return sum(_DEF_COUNT[layer] for layer in layers)


def max_rep(layers: list[int]) -> int:
    return sum(layer in _LIST_LAYERS for layer in layers)


def visible_threshold(layers: list[int]) -> int:
    """Largest definition value that still has a leaf slot (placeholder value)."""
    table = _visibility_table(layers)
    return max(d for d, j in enumerate(table) if j == 0)


def _visibility_table(layers: list[int]) -> np.ndarray:
    """For each definition value, the innermost layer index that has a slot for it."""
    table = [0]
    innermost_list = 0
    for j, layer in enumerate(layers):
        if layer in _LIST_LAYERS:
            innermost_list = j
        table.extend([innermost_list] * _DEF_COUNT[layer])
    return np.array(table, dtype=np.int64)


def unravel(
    ctx: Ctx, rep: np.ndarray | None, defs: np.ndarray | None, layers: list[int], n_entries: int
) -> Structure:
    """Validity/offsets of every layer (outermost first) and the leaf's visible slots.

    The levels are compared in their stored (u16) type; a layer's slots are
    the entries passing two thresholds (visibility is monotonic in the
    definition value, so "visible at layer ``j``" is ``def <= limit[j]``);
    when every entry is a slot of a layer its positions are not materialised.
    """
    depth = len(layers)
    top_rep = max_rep(layers)
    if rep is not None and len(rep) != n_entries or defs is not None and len(defs) != n_entries:
        raise ctx.corrupt("repetition and definition levels differ in length")
    if top_rep and rep is None and n_entries:
        raise ctx.corrupt("list layers without repetition levels")
    if rep is not None:
        if top_rep == 0:
            raise ctx.corrupt("repetition levels without list layers")
        if n_entries and (int(rep[0]) != top_rep or int(rep.max()) > top_rep):
            raise ctx.corrupt("repetition levels out of range")
    visibility = _visibility_table(layers)
    max_def_seen = int(defs.max()) if defs is not None and n_entries else 0
    if max_def_seen >= len(visibility):
        raise ctx.corrupt(f"definition level {max_def_seen} out of range")
    if rep is None and defs is None:
        return Structure([Level(n_entries, None) for _ in range(depth)], n_entries, None)
    def_base = np.concatenate(([0], np.cumsum([_DEF_COUNT[layer] for layer in layers]))).tolist()
    if rep is None:
        # no lists: every entry is a slot of every layer, a layer is valid below its own null level
        out = []
        for j in range(depth - 1, -1, -1):
            valid = None if max_def_seen <= def_base[j] else defs <= def_base[j]
            out.append(Level(n_entries, None if valid is None or bool(valid.all()) else valid))
        return Structure(out, n_entries, out[-1].validity)
    lists_inside = np.cumsum([layer in _LIST_LAYERS for layer in layers]).tolist()
    # largest definition value visible at layer j (visibility is non-decreasing in the value)
    limit = [int(np.flatnonzero(visibility <= j)[-1]) for j in range(depth)]
    cache: dict[int, tuple[np.ndarray | None, np.ndarray | None]] = {}

    def slots_at(j: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(mask, positions) of the entries starting a slot at layer ``j`` (None, None: every entry)."""
        if j not in cache:
            mask = None
            if defs is not None and max_def_seen > limit[j]:
                mask = defs <= limit[j]
            if lists_inside[j]:
                starts = rep >= lists_inside[j]
                mask = starts if mask is None else mask & starts
            cache[j] = (mask, None if mask is None else np.flatnonzero(mask))
        return cache[j]

    out: list[Level] = []
    leaf_slot_def = None
    for j in range(depth - 1, -1, -1):
        positions = slots_at(j)[1]
        length = n_entries if positions is None else len(positions)
        layer = layers[j]
        validity = None
        if defs is not None:
            slot_def = defs if positions is None else defs[positions]
            if j == 0:
                leaf_slot_def = slot_def
            empty_value = def_base[j] + _DEF_COUNT[layer] \
                if layer in (pb.REPDEF_EMPTYABLE_LIST, pb.REPDEF_NULL_AND_EMPTY_LIST) else None
            if max_def_seen > def_base[j]:
                valid = slot_def <= def_base[j]
                if empty_value is not None:
                    valid |= slot_def == empty_value
                validity = None if bool(valid.all()) else valid
        offsets = None
        if layer in _LIST_LAYERS:
            if j == 0:
                raise ctx.corrupt("a list layer cannot be the leaf")
            child_mask = slots_at(j - 1)[0]
            offsets = np.empty(length + 1, dtype=np.int64)
            if child_mask is None:  # every entry is a child slot: a list starts at its entry's index
                offsets[:-1] = np.arange(n_entries) if positions is None else positions
                offsets[-1] = n_entries
            else:  # child slots before each list slot
                counted = exclusive_cumsum(child_mask)
                offsets[:-1] = counted[:-1] if positions is None else counted[positions]
                offsets[-1] = counted[-1]
        out.append(Level(length, validity, offsets))
    leaf = out[-1]
    leaf_valid = None
    if leaf_slot_def is not None and max_def_seen > 0:
        leaf_valid = leaf_slot_def == 0
        if bool(leaf_valid.all()):
            leaf_valid = None
    return Structure(out, leaf.length, leaf_valid)


# ----------------------------------------------------------------------------- writing


@dataclass
class NodeData:
    """Writer input for one node (outermost first): slots, nulls, list offsets (into child slots)."""

    kind: str
    length: int
    valid: np.ndarray | None
    offsets: np.ndarray | None = None


def layers_for(nodes: list[NodeData]) -> list[int]:
    """The RepDefLayer of every node, innermost first.

    A struct in a path with a list is always written as nullable: pylance 14
    counts the validity of an all-valid struct layer in level entries rather
    than slots, so in a column whose pages differ (some with struct nulls,
    some without) a page with an all-valid struct layer corrupts the struct
    validity as soon as the entry count differs from the struct slots (null or
    empty lists, lists of several items). A list below such a struct is never
    written all-valid (see below); both cost at most one unused level value.
    """
    out = []
    has_list = any(node.kind == LIST for node in nodes)
    nullable_above = [False] * len(nodes)  # outermost first: is there a nullable struct above node i
    for i in range(1, len(nodes)):
        above = nodes[i - 1]
        nullable_above[i] = nullable_above[i - 1] or (above.kind != LIST and has_list)
    for depth, node in enumerate(reversed(nodes)):
        nullable = node.valid is not None and not bool(node.valid.all())
        if node.kind != LIST and has_list and depth > 0:
            nullable = True
        if node.kind == LIST and nullable_above[len(nodes) - 1 - depth]:
            # pylance 14 does not count an all-valid list layer when it maps the definition
            # levels of the struct layers above it to list depths: never write one under a struct
            lengths = np.diff(node.offsets)
            if node.valid is not None:
                lengths = lengths[node.valid]
            if not nullable and not bool(np.any(lengths == 0)):
                out.append(pb.REPDEF_EMPTYABLE_LIST)
                continue
        if node.kind == LIST:
            lengths = np.diff(node.offsets)
            if node.valid is not None:
                lengths = lengths[node.valid]
            empty = bool(np.any(lengths == 0))
            out.append({(False, False): pb.REPDEF_ALL_VALID_LIST, (True, False): pb.REPDEF_NULLABLE_LIST,
                        (False, True): pb.REPDEF_EMPTYABLE_LIST,
                        (True, True): pb.REPDEF_NULL_AND_EMPTY_LIST}[(nullable, empty)])
        else:
            out.append(pb.REPDEF_NULLABLE_ITEM if nullable else pb.REPDEF_ALL_VALID_ITEM)
    return out


def levels(nodes: list[NodeData], layers: list[int]) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """(rep, def, leaf slot of every entry or -1) for nodes outermost first; slots None = identity.

    Every slot is an entry, except that a valid non-empty list is replaced by
    its children's entries (null/empty lists and slots under them stay single
    entries). Without lists every slot is one entry and only definition
    levels are computed; when every list is valid and non-empty the entries
    are the leaf slots (:func:`_levels_without_gaps`, no per-entry work but one
    assignment per level); otherwise :func:`_levels_general` places them.
    """
    return levels_and_rows(nodes, layers)[:3]


def levels_and_rows(
    nodes: list[NodeData], layers: list[int]
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """:func:`levels` and the first entry of every row (the entries with the top repetition level;
    None without lists), which the levels are built from anyway."""
    depth = len(nodes)
    def_base = np.concatenate(([0], np.cumsum([_DEF_COUNT[layer] for layer in layers])))
    rep_number = np.cumsum([layer in _LIST_LAYERS for layer in layers])
    top = rep_number[-1] if depth else 0
    if top == 0:
        if def_base[-1] == 0:
            return None, None, None, None
        defs = np.zeros(nodes[0].length, dtype=np.uint16)
        for depth_index, node in enumerate(nodes):
            if node.valid is not None:
                j = depth - 1 - depth_index
                defs[(defs == 0) & ~node.valid] = def_base[j] + 1
        # every slot keeps its entry: Arrow's own values under nulls serve as placeholders
        return None, defs, None, None
    if _without_gaps(nodes):
        return _levels_without_gaps(nodes, layers, def_base, rep_number)
    if depth == 2 and nodes[0].kind == LIST:
        single = _levels_single_list(nodes, layers, def_base)
        if single is not None:
            return single
    return _levels_general(nodes, layers, def_base, rep_number)


def _nulls(node: NodeData) -> np.ndarray | None:
    """Null slots of a node (None: none)."""
    return None if node.valid is None or bool(node.valid.all()) else ~node.valid


def _levels_single_list(
    nodes: list[NodeData], layers: list[int], def_base: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray] | None:
    """:func:`levels_and_rows` of a list of items (the common ``list<primitive>``) with gaps, or None
    when a null list covers items (then :func:`_levels_general`).

    A row is its items' entries, or one entry if null or empty (a gap); an
    entry's leaf slot is its position minus the gaps up to it.
    """
    node, item = nodes
    offsets = node.offsets
    lengths = np.diff(offsets)
    null = _nulls(node)
    if int(offsets[0]) != 0 or int(offsets[-1]) != item.length or (
            null is not None and bool(np.any(lengths[null]))):
        return None
    gaps = np.flatnonzero(lengths == 0)  # null lists are empty too
    np.maximum(lengths, 1, out=lengths)  # entries per row
    row_starts = exclusive_cumsum(lengths)
    total = int(row_starts[-1])
    row_starts = row_starts[:-1]
    reps = np.zeros(total, dtype=np.uint16)
    reps[row_starts] = 1
    gap_at = row_starts[gaps]
    is_gap = np.zeros(total, dtype=bool)
    is_gap[gap_at] = True
    slot = np.cumsum(~is_gap, dtype=np.int64)  # items up to and including each entry
    slot -= 1
    slot[gap_at] = -1
    defs = None
    if def_base[-1]:
        defs = np.zeros(total, dtype=np.uint16)
        if layers[1] in (pb.REPDEF_EMPTYABLE_LIST, pb.REPDEF_NULL_AND_EMPTY_LIST):
            defs[gap_at] = def_base[1] + _DEF_COUNT[layers[1]]
        if null is not None:
            defs[row_starts[np.flatnonzero(null)]] = def_base[1] + 1
        item_null = _nulls(item)
        if item_null is not None:
            at = np.flatnonzero(~is_gap)[item_null]
            defs[at] = def_base[0] + 1
            slot[at] = -1
    return reps, defs, slot, row_starts


def _levels_general(
    nodes: list[NodeData], layers: list[int], def_base: np.ndarray, rep_number: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """:func:`levels_and_rows` of a path with lists: any null/empty lists, nulls at any layer.

    A slot that is null, or an empty list, is an entry by itself (a *gap*);
    other slots hold the entries of their children. Entries per slot are
    counted from the inside out, then the first entry of every reachable
    slot is placed from the outside in (a row's entries start after those of
    the rows before it, a child's after its earlier siblings'; below the
    innermost list, simply the entries no gap took). Gaps get their
    definition level, the first entry of every slot below a list gets the
    list's repetition number minus one (rows the maximum), inner layers first
    so that outer ones win; leaf entries get their leaf slot.
    """
    depth = len(nodes)
    gaps, counts = _gaps_and_counts(nodes, layers, def_base)
    total = nodes[0].length if counts[0] is None else int(counts[0].sum())
    reps = np.zeros(total, dtype=np.uint16)
    defs = np.zeros(total, dtype=np.uint16)
    slot = np.full(total, -1, dtype=np.int64)
    position = np.arange(nodes[0].length, dtype=np.int64) if counts[0] is None else exclusive_cumsum(counts[0])[:-1]
    firsts = [(int(rep_number[-1]), position)]  # (repetition level, first entries), outermost first
    reach = None  # reachable slots of the current layer (None: all)
    gap_at = np.zeros(total, dtype=bool)  # entries placed so far (gaps at or above the innermost list)
    for index, node in enumerate(nodes):
        gap = gaps[index]
        live = reach
        if gap is not None:
            mask, values = gap
            hit = mask if reach is None else mask & reach
            at = position[hit]
            defs[at] = values[hit]
            gap_at[at] = True
            live = ~mask if reach is None else reach & ~mask
        if index == depth - 1:
            if live is None:
                slot[position] = np.arange(node.length, dtype=np.int64)
            else:
                slot[position[live]] = np.flatnonzero(live)
        elif node.kind != LIST:
            reach = live
        elif counts[index + 1] is None:
            # innermost list (its repetition number minus one is 0): every entry not placed yet
            # belongs to one of its reachable children, one each, in order
            position, reach = _remaining_positions(node, live, gap_at, nodes[index + 1].length)
        else:
            position, reach = _child_positions(node, live, position, counts[index + 1], nodes[index + 1].length)
            value = int(rep_number[depth - 1 - index]) - 1
            if value:
                firsts.append((value, position if reach is None else position[reach]))
    for value, first in reversed(firsts):
        reps[first] = value
    return reps, defs if def_base[-1] else None, slot, firsts[0][1]


def _gaps_and_counts(
    nodes: list[NodeData], layers: list[int], def_base: np.ndarray
) -> tuple[list[tuple[np.ndarray, np.ndarray] | None], list[np.ndarray | None]]:
    """Per node: its gaps (mask, definition level per slot) or None, and entries per slot (None: one each)."""
    depth = len(nodes)
    gaps: list[tuple[np.ndarray, np.ndarray] | None] = [None] * depth
    counts: list[np.ndarray | None] = [None] * depth
    for index in range(depth - 1, -1, -1):
        node, j = nodes[index], depth - 1 - index
        null = None if node.valid is None or bool(node.valid.all()) else ~node.valid
        if node.kind == LIST:
            child = counts[index + 1]
            if child is None:
                count = np.diff(node.offsets)
                empty = count == 0
            else:
                cumulative = exclusive_cumsum(child)
                count = cumulative[node.offsets[1:]] - cumulative[node.offsets[:-1]]
                empty = node.offsets[1:] == node.offsets[:-1]
            mask = empty if null is None else empty | null
            if bool(mask.any()):
                values = np.zeros(node.length, dtype=np.uint16)
                if layers[j] in (pb.REPDEF_EMPTYABLE_LIST, pb.REPDEF_NULL_AND_EMPTY_LIST):
                    values[empty] = def_base[j] + _DEF_COUNT[layers[j]]
                if null is not None:
                    values[null] = def_base[j] + 1
                gaps[index] = (mask, values)
                count[mask] = 1
            counts[index] = count
        else:
            count = counts[index + 1] if index + 1 < depth else None  # a struct has its child's slots
            if null is not None:
                gaps[index] = (null, np.full(node.length, def_base[j] + 1, dtype=np.uint16))
                if count is not None:
                    count = count.copy()
                    count[null] = 1
            counts[index] = count
    return gaps, counts


def _remaining_positions(
    node: NodeData, live: np.ndarray | None, gap_at: np.ndarray, child_length: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """Entries of the children of the innermost list: all entries that are not gaps, in order.

    Below the innermost list every reachable child slot is exactly one entry,
    so its children's entries are the positions not taken by a gap of this
    or an outer layer. Returns them per child slot and the reachable child
    slots (None: all).
    """
    entries = np.flatnonzero(~gap_at)
    reach = _child_reach(node, live, child_length)
    if reach is None:
        return entries, None
    position = np.zeros(child_length, dtype=np.int64)
    position[reach] = entries
    return position, reach


def _child_reach(node: NodeData, live: np.ndarray | None, child_length: int) -> np.ndarray | None:
    """Child slots under a live list slot (None: all of them)."""
    offsets = node.offsets
    nonempty = offsets[1:] > offsets[:-1]
    if int(offsets[0]) == 0 and int(offsets[-1]) == child_length and (
            live is None or not bool(np.any(nonempty & ~live))):
        return None
    holders = nonempty if live is None else nonempty & live
    parents = np.flatnonzero(holders)
    bounds = np.bincount(offsets[parents], minlength=child_length + 1) - np.bincount(
        offsets[parents + 1], minlength=child_length + 1)
    return np.cumsum(bounds[:-1]) > 0


def _child_positions(
    node: NodeData, live: np.ndarray | None, position: np.ndarray, child_counts: np.ndarray | None, child_length: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """First entry of every child slot of a list layer, and which child slots are reachable (None: all).

    A child's first entry is its parent's plus the entries of its earlier
    siblings: ``position[parent] - before[offsets[parent]] + before[child]``
    with ``before`` the entries of all child slots before a child. The
    per-parent shift is added at each parent's first child (live non-empty
    parents start at distinct children) to the entries of the previous child,
    and one in-place cumulative sum gives every child's position: a single
    child-sized array (fresh large arrays cost page faults).
    """
    offsets = node.offsets
    nonempty = offsets[1:] > offsets[:-1]
    holders = nonempty if live is None else nonempty & live
    parents = np.flatnonzero(holders)
    starts = offsets[parents]
    if child_counts is None:
        steps = np.ones(child_length, dtype=np.int64)
        before_starts = starts
    else:
        steps = np.empty(child_length, dtype=np.int64)
        steps[1:] = child_counts[:-1]
        before_starts = exclusive_cumsum(child_counts)[starts]
    if child_length:
        steps[0] = 0
    if len(parents):
        shift = position[parents]
        shift -= before_starts
        steps[starts] += shift
        steps[starts[1:]] -= shift[:-1]
    return np.cumsum(steps, out=steps), _child_reach(node, live, child_length)


def _without_gaps(nodes: list[NodeData]) -> bool:
    """Every leaf slot is an entry and every entry a leaf slot (no null/empty list, no null above a list).

    Holds when every list slot is valid and non-empty, its offsets cover
    exactly the child slots, and no struct above a list is null: then nulls
    only occur below the innermost list, where slots map one to one to leaf
    slots.
    """
    innermost_list = max(i for i, node in enumerate(nodes) if node.kind == LIST)
    for i, node in enumerate(nodes[:-1]):
        child = nodes[i + 1]
        if i <= innermost_list and node.valid is not None and not bool(node.valid.all()):
            return False
        if node.kind != LIST:
            if child.length != node.length:
                return False
            continue
        offsets = node.offsets
        if len(offsets) != node.length + 1 or (node.length and (
                int(offsets[0]) != 0 or int(offsets[-1]) != child.length or bool(np.any(offsets[1:] <= offsets[:-1])))):
            return False
        if not node.length and child.length:
            return False
    return True


def _levels_without_gaps(
    nodes: list[NodeData], layers: list[int], def_base: np.ndarray, rep_number: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray]:
    """:func:`levels_and_rows` when entries are exactly the leaf slots (see :func:`_without_gaps`).

    Repetition levels are zero but at the first entry of every slot of a layer
    below a list (the list's number minus one) and of every row (the maximum):
    one zeros() and one fancy assignment per list layer, innermost first so
    outer layers (larger values) win. Definition levels only come from nulls
    below the innermost list, one to one with leaf slots.
    """
    depth = len(nodes)
    n = nodes[-1].length
    reps = np.zeros(n, dtype=np.uint16)
    positions = None  # the leaf entry starting each slot of the current layer (None: identity)
    for index in range(depth - 1, -1, -1):
        node = nodes[index]
        if node.kind != LIST:
            continue
        value = int(rep_number[depth - 1 - index]) - 1
        if value and positions is not None:
            reps[positions] = value
        starts = node.offsets[:-1]
        positions = starts if positions is None else positions[starts]
    if positions is not None and len(positions):
        reps[positions] = rep_number[-1]
    if def_base[-1] == 0:
        return reps, None, None, positions
    defs = np.zeros(n, dtype=np.uint16)
    for index, node in enumerate(nodes):
        if node.valid is not None and not bool(node.valid.all()):
            defs[(defs == 0) & ~node.valid] = def_base[depth - 1 - index] + 1
    if not defs.any():
        return reps, defs, None, positions
    slots = np.arange(n, dtype=np.int64)
    slots[defs != 0] = -1
    return reps, defs, slots, positions
