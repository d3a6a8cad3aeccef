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
    """Validity/offsets of every layer (outermost first) and the leaf's visible slots."""
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
    if defs is not None and n_entries and int(defs.max()) >= len(visibility):
        raise ctx.corrupt(f"definition level {int(defs.max())} out of range")
    if rep is None and defs is None:
        return Structure([Level(n_entries, None) for _ in range(depth)], n_entries, None)
    if rep is None:
        # no lists: every entry is a slot of every layer, a layer is valid below its own null level
        def_base = np.cumsum([0] + [_DEF_COUNT[layer] for layer in layers])
        out = []
        for j in range(depth - 1, -1, -1):
            valid = defs <= def_base[j]
            out.append(Level(n_entries, None if bool(valid.all()) else valid))
        return Structure(out, n_entries, out[-1].validity)
    defs_i = defs.astype(np.int64) if defs is not None else None
    vis_layer = visibility[defs_i] if defs_i is not None else None
    rep_i = rep.astype(np.int64) if rep is not None else None
    def_base = np.concatenate(([0], np.cumsum([_DEF_COUNT[layer] for layer in layers])))
    lists_inside = np.cumsum([layer in _LIST_LAYERS for layer in layers])

    def starts_at(j: int) -> np.ndarray:
        mask = np.ones(n_entries, dtype=bool) if vis_layer is None else vis_layer <= j
        if rep_i is not None and lists_inside[j]:
            mask &= rep_i >= lists_inside[j]
        return mask

    out: list[Level] = []
    child_starts = None
    for j in range(depth - 1, -1, -1):
        starts = child_starts if child_starts is not None else starts_at(j)
        positions = np.flatnonzero(starts)
        layer = layers[j]
        validity = None
        if defs_i is not None:
            slot_def = defs_i[positions]
            valid = slot_def <= def_base[j]
            if layer in (pb.REPDEF_EMPTYABLE_LIST, pb.REPDEF_NULL_AND_EMPTY_LIST):
                valid |= slot_def == def_base[j] + _DEF_COUNT[layer]
            validity = None if bool(valid.all()) else valid
        offsets = None
        child_starts = starts_at(j - 1) if j > 0 else None
        if layer in _LIST_LAYERS:
            if j == 0:
                raise ctx.corrupt("a list layer cannot be the leaf")
            counted = exclusive_cumsum(child_starts)
            offsets = np.empty(len(positions) + 1, dtype=np.int64)
            offsets[:-1] = counted[positions]
            offsets[-1] = counted[-1]
        out.append(Level(len(positions), validity, offsets))
    leaf = out[-1]
    leaf_valid = None
    if defs_i is not None:
        leaf_positions = np.flatnonzero(starts_at(0))
        leaf_valid = defs_i[leaf_positions] == 0
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

    Works from the outside in: every slot of the current layer is an entry
    (null/empty lists and slots under them stay single entries), a valid
    non-empty list is replaced by its children's entries. Without lists every
    slot is one entry and only definition levels are computed.
    """
    depth = len(nodes)
    def_base = np.concatenate(([0], np.cumsum([_DEF_COUNT[layer] for layer in layers])))
    rep_number = np.cumsum([layer in _LIST_LAYERS for layer in layers])
    top = rep_number[-1] if depth else 0
    if top == 0:
        if def_base[-1] == 0:
            return None, None, None
        defs = np.zeros(nodes[0].length, dtype=np.uint16)
        for depth_index, node in enumerate(nodes):
            if node.valid is not None:
                j = depth - 1 - depth_index
                defs[(defs == 0) & ~node.valid] = def_base[j] + 1
        # every slot keeps its entry: Arrow's own values under nulls serve as placeholders
        return None, defs, None
    # current entries: (slot index into the current layer or -1, def, rep)
    slot = np.arange(nodes[0].length, dtype=np.int64)
    defs = np.zeros(nodes[0].length, dtype=np.int64)
    reps = np.full(nodes[0].length, top, dtype=np.int64)
    for depth_index, node in enumerate(nodes):
        j = depth - 1 - depth_index
        live = slot >= 0
        if node.valid is not None:
            null = live.copy()
            null[live] = ~node.valid[slot[live]]
            defs[null] = def_base[j] + 1
            slot[null] = -1
        if node.kind != LIST:
            continue
        live = slot >= 0
        lengths = np.zeros(len(slot), dtype=np.int64)
        lengths[live] = node.offsets[slot[live] + 1] - node.offsets[slot[live]]
        empty = live & (lengths == 0)
        if layers[j] in (pb.REPDEF_EMPTYABLE_LIST, pb.REPDEF_NULL_AND_EMPTY_LIST):
            defs[empty] = def_base[j] + _DEF_COUNT[layers[j]]
        slot[empty] = -1
        expand = np.where(slot >= 0, lengths, 1)
        new_slot = np.repeat(slot, expand)
        first = exclusive_cumsum(expand)[:-1]
        within = np.arange(len(new_slot), dtype=np.int64) - np.repeat(first, expand)
        live_new = new_slot >= 0
        new_slot[live_new] = np.repeat(node.offsets[:-1][slot[slot >= 0]], lengths[slot >= 0]) + within[live_new]
        new_reps = np.repeat(reps, expand)
        inner = within > 0
        new_reps[inner] = rep_number[j] - 1
        slot, defs, reps = new_slot, np.repeat(defs, expand), new_reps
    rep_out = reps.astype(np.uint16) if top else None
    def_out = defs.astype(np.uint16) if def_base[-1] else None
    return rep_out, def_out, slot
