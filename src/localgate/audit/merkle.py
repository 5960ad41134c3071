"""The Merkle tree of RFC 6962 / RFC 9162 section 2, over a hash function chosen per log.

Each tenant's audit log is an append-only sequence of leaf hashes. Its Merkle Tree Hash
(MTH) commits to every leaf and its position; inclusion proofs show that one record is
in the tree, consistency proofs that a later tree extends an earlier one unchanged::

    MTH({})      = H()                              empty_root()
    MTH({d0})    = H(0x00 || d0)                    hash_leaf(d0)
    MTH(D[n])    = H(0x01 || MTH(D[0:k]) || MTH(D[k:n]))   hash_children(...)
                   where k is the largest power of two smaller than n

Everything here works on leaf *hashes* (``hash_leaf`` of the canonical record bytes),
so the tree can be rebuilt and checked without the records' payloads.

``Frontier`` is the compact range of a tree (the roots of the perfect subtrees that
cover leaves ``[0, size)``): O(log n) to append and to store, and enough to compute
the root, so the writer never reads old leaves back.

``root_of`` computes the root of 1,000,000 SHA-256 leaf hashes in 0.6-0.9 s on the
development machine (2 vCPU AMD EPYC, CPython 3.11.7; SM3 through ``cryptography``
2.2-2.6 s); appending the same million leaves to a ``Frontier`` takes about 0.9 s.
Proof generation hashes each proof node's subtree afresh: O(n) per proof, which is
fine for the audit verifier and tests, and is why the writer uses ``Frontier``.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable, Sequence

from cryptography.hazmat.primitives import hashes

__all__ = [
    "ALGORITHMS",
    "Frontier",
    "TreeHasher",
    "consistency_proof",
    "inclusion_proof",
    "root_of",
    "verify_consistency",
    "verify_inclusion",
]

ALGORITHMS = ("sha256", "sm3")

_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"
_FRONTIER_VERSION = 1
# Version byte, name length byte, then the name, then the tree size: see Frontier.to_bytes.
_FRONTIER_SIZE = struct.Struct(">Q")


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _sm3(data: bytes) -> bytes:
    digest = hashes.Hash(hashes.SM3())
    digest.update(data)
    return digest.finalize()


class TreeHasher:
    """The RFC 6962 leaf and node hashes over SHA-256 or SM3 (GB/T 32905)."""

    __slots__ = ("_digest", "name", "size")

    def __init__(self, algorithm: str = "sha256") -> None:
        digests: dict[str, Callable[[bytes], bytes]] = {"sha256": _sha256, "sm3": _sm3}
        digest = digests.get(algorithm)
        if digest is None:
            raise ValueError(
                f"unknown Merkle hash algorithm {algorithm!r}; use one of {', '.join(ALGORITHMS)}"
            )
        self._digest = digest
        self.name = algorithm
        self.size = len(digest(b""))

    def __repr__(self) -> str:
        return f"TreeHasher({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TreeHasher) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def empty_root(self) -> bytes:
        """The root of the empty tree: the hash of the empty string."""
        return self._digest(b"")

    def hash_leaf(self, data: bytes) -> bytes:
        """``H(0x00 || data)``: the leaf hash of one entry."""
        return self._digest(_LEAF_PREFIX + data)

    def hash_children(self, left: bytes, right: bytes) -> bytes:
        """``H(0x01 || left || right)``: an interior node from its two children."""
        return self._digest(_NODE_PREFIX + left + right)


class Frontier:
    """The roots of the perfect subtrees covering leaves ``[0, size)``, largest first.

    One hash per set bit of ``size``: the state a log writer keeps between appends.
    """

    __slots__ = ("_hasher", "_hashes", "_size")

    def __init__(self, hasher: TreeHasher, size: int = 0, hashes: Iterable[bytes] = ()) -> None:
        stored = list(hashes)
        if size < 0:
            raise ValueError(f"a tree size cannot be negative, got {size}")
        if len(stored) != size.bit_count():
            raise ValueError(
                f"a frontier of size {size} has {size.bit_count()} hashes, got {len(stored)}"
            )
        if any(len(node) != hasher.size for node in stored):
            raise ValueError(f"every frontier hash must be {hasher.size} bytes ({hasher.name})")
        self._hasher = hasher
        self._size = size
        self._hashes = stored

    def __repr__(self) -> str:
        return f"Frontier({self._hasher.name!r}, size={self._size})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Frontier)
            and other._hasher == self._hasher
            and other._size == self._size
            and other._hashes == self._hashes
        )

    __hash__ = None  # type: ignore[assignment]  # mutable: append changes equality

    @property
    def hasher(self) -> TreeHasher:
        """The hash function of this tree."""
        return self._hasher

    @property
    def size(self) -> int:
        """The number of leaves appended so far."""
        return self._size

    @property
    def hashes(self) -> tuple[bytes, ...]:
        """The subtree roots, from the leftmost (largest) subtree to the rightmost."""
        return tuple(self._hashes)

    def append(self, leaf_hash: bytes) -> None:
        """Add the next leaf; merges the equal-sized subtrees it completes (O(log n))."""
        if len(leaf_hash) != self._hasher.size:
            raise ValueError(f"a leaf hash must be {self._hasher.size} bytes ({self._hasher.name})")
        node = leaf_hash
        # Like a binary increment: each trailing 1 bit of size is a subtree of the same
        # height as ``node`` that now has a right sibling, so the two merge and carry.
        size = self._size
        while size & 1:
            node = self._hasher.hash_children(self._hashes.pop(), node)
            size >>= 1
        self._hashes.append(node)
        self._size += 1

    def root(self) -> bytes:
        """The RFC 6962 Merkle Tree Hash of all leaves appended so far."""
        if not self._hashes:
            return self._hasher.empty_root()
        # The RFC splits at the largest power of two, so smaller subtrees to the right
        # hang under the larger ones: fold from the right.
        node = self._hashes[-1]
        for left in reversed(self._hashes[:-1]):
            node = self._hasher.hash_children(left, node)
        return node

    def to_bytes(self) -> bytes:
        """``version || len(name) || name || size (u64 BE) || hashes``, for a BLOB column."""
        name = self._hasher.name.encode("ascii")
        return b"".join(
            (
                bytes((_FRONTIER_VERSION, len(name))),
                name,
                _FRONTIER_SIZE.pack(self._size),
                *self._hashes,
            )
        )

    @classmethod
    def from_bytes(cls, hasher: TreeHasher, data: bytes) -> Frontier:
        """The frontier that ``to_bytes`` stored; ``ValueError`` if damaged or not ``hasher``'s."""
        if len(data) < 2 or data[0] != _FRONTIER_VERSION:
            raise ValueError("not a stored Merkle frontier (unknown version)")
        name_end = 2 + data[1]
        name = data[2:name_end]
        if name != hasher.name.encode("ascii"):
            raise ValueError(
                f"the stored frontier uses {name.decode('ascii', 'replace')!r}, not {hasher.name!r}"
            )
        size_end = name_end + _FRONTIER_SIZE.size
        if len(data) < size_end:
            raise ValueError("the stored Merkle frontier is truncated")
        (size,) = _FRONTIER_SIZE.unpack(data[name_end:size_end])
        body = data[size_end:]
        if len(body) != size.bit_count() * hasher.size:
            raise ValueError(f"the stored Merkle frontier of size {size} has the wrong length")
        nodes = [body[i : i + hasher.size] for i in range(0, len(body), hasher.size)]
        return cls(hasher, size, nodes)


def root_of(hasher: TreeHasher, leaf_hashes: Sequence[bytes]) -> bytes:
    """The RFC 6962 Merkle Tree Hash of ``leaf_hashes``, computed level by level."""
    if not leaf_hashes:
        return hasher.empty_root()
    children = hasher.hash_children
    level = list(leaf_hashes)
    # Pairing neighbours and carrying an odd last node up unchanged builds exactly the
    # RFC's tree: the RFC's left subtrees are perfect and aligned, so only the rightmost
    # node of a level can lack a sibling, and it is the RFC's smaller right subtree.
    while len(level) > 1:
        pairs = iter(level)
        upper = [children(left, right) for left, right in zip(pairs, pairs, strict=False)]
        if len(level) & 1:
            upper.append(level[-1])
        level = upper
    return level[0]


def _split(size: int) -> int:
    """The largest power of two strictly smaller than ``size`` (which is at least 2)."""
    return 1 << ((size - 1).bit_length() - 1)


def inclusion_proof(hasher: TreeHasher, index: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of ``leaf_hashes`` (RFC 9162 2.1.3.1)."""
    if not 0 <= index < len(leaf_hashes):
        raise ValueError(f"leaf {index} is not in a tree of {len(leaf_hashes)} leaves")
    path: list[bytes] = []
    low, high = 0, len(leaf_hashes)
    # The RFC recurses from the root down and appends each sibling after the deeper
    # path, so walking down collects the path from the top: reverse it at the end.
    while high - low > 1:
        middle = low + _split(high - low)
        if index < middle:
            path.append(root_of(hasher, leaf_hashes[middle:high]))
            high = middle
        else:
            path.append(root_of(hasher, leaf_hashes[low:middle]))
            low = middle
    path.reverse()
    return path


def consistency_proof(
    hasher: TreeHasher, old_size: int, leaf_hashes: Sequence[bytes]
) -> list[bytes]:
    """Proof that the tree of the first ``old_size`` leaves is a prefix (RFC 9162 2.1.4.1)."""
    new_size = len(leaf_hashes)
    if not 0 <= old_size <= new_size:
        raise ValueError(f"old size {old_size} is not between 0 and the tree size {new_size}")
    proof: list[bytes] = []
    if old_size in (0, new_size):
        return proof
    low, high, remaining = 0, new_size, old_size
    # ``whole`` is the RFC's flag b: true while the old tree's root is itself a node on
    # this path, which the verifier already holds and so is left out of the proof.
    whole = True
    while remaining != high - low:
        split = _split(high - low)
        if remaining <= split:
            proof.append(root_of(hasher, leaf_hashes[low + split : high]))
            high = low + split
        else:
            proof.append(root_of(hasher, leaf_hashes[low : low + split]))
            low += split
            remaining -= split
            whole = False
    if not whole:
        proof.append(root_of(hasher, leaf_hashes[low:high]))
    proof.reverse()
    return proof


def verify_inclusion(
    hasher: TreeHasher,
    index: int,
    tree_size: int,
    leaf_hash: bytes,
    proof: Sequence[bytes],
    root: bytes,
) -> bool:
    """Whether ``proof`` shows leaf ``index`` of the tree with ``root`` is ``leaf_hash``.

    The algorithm of RFC 9162 section 2.1.3.2. The proof does not authenticate
    ``tree_size`` (leaf 0's path is the same in trees of 3 and 4 leaves): take the size
    and root from a signed checkpoint, never from whoever sent the proof.
    """
    if not 0 <= index < tree_size:
        return False
    if not _all_sized(hasher, (leaf_hash, root, *proof)):
        return False
    fn, sn = index, tree_size - 1
    node = leaf_hash
    for sibling in proof:
        if sn == 0:
            return False  # the proof is longer than the path to the root
        if fn & 1 or fn == sn:
            node = hasher.hash_children(sibling, node)
            # A right-edge node without a sibling is carried up: skip those levels.
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            node = hasher.hash_children(node, sibling)
        fn >>= 1
        sn >>= 1
    return sn == 0 and node == root


def verify_consistency(
    hasher: TreeHasher,
    old_size: int,
    new_size: int,
    old_root: bytes,
    new_root: bytes,
    proof: Sequence[bytes],
) -> bool:
    """Whether ``proof`` shows the tree ``new_root`` extends the tree ``old_root`` unchanged.

    The algorithm of RFC 9162 section 2.1.4.2 for ``0 < old_size < new_size``. The RFC
    leaves the edge cases open; here equal sizes need equal roots and an empty proof,
    and an old size of 0 needs the empty tree's root and an empty proof. As with
    inclusion, the sizes are not authenticated by the proof: take both heads from
    signed checkpoints.
    """
    if not 0 <= old_size <= new_size:
        return False
    if not _all_sized(hasher, (old_root, new_root, *proof)):
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if old_size == 0:
        return not proof and old_root == hasher.empty_root()
    if not proof:
        return False
    path = list(proof)
    # A power-of-two old tree is a node of the new tree, so the proof omits it.
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    old_node = new_node = path[0]
    for node in path[1:]:
        if sn == 0:
            return False  # the proof is longer than the path to the root
        if fn & 1 or fn == sn:
            old_node = hasher.hash_children(node, old_node)
            new_node = hasher.hash_children(node, new_node)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            new_node = hasher.hash_children(new_node, node)
        fn >>= 1
        sn >>= 1
    return sn == 0 and old_node == old_root and new_node == new_root


def _all_sized(hasher: TreeHasher, nodes: Iterable[bytes]) -> bool:
    return all(len(node) == hasher.size for node in nodes)
