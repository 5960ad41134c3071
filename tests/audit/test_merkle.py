"""The Merkle tree against RFC 6962 test vectors and a recursive reference implementation.

The vectors (the eight test leaves, the roots of sizes 1 to 8 and the proofs) are the
ones published with Certificate Transparency and kept in transparency-dev/merkle
(``proof/verify_test.go``). ``reference_root`` recomputes every root from the RFC's
recursive definition, so the numbers are checked, not only copied.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import pytest
from cryptography.hazmat.primitives import hashes
from hypothesis import given, settings
from hypothesis import strategies as st

from localgate.audit.merkle import (
    Frontier,
    TreeHasher,
    consistency_proof,
    inclusion_proof,
    root_of,
    verify_consistency,
    verify_inclusion,
)

SHA256 = TreeHasher("sha256")
SM3 = TreeHasher("sm3")

RFC6962_LEAVES = [
    bytes.fromhex(""),
    bytes.fromhex("00"),
    bytes.fromhex("10"),
    bytes.fromhex("2021"),
    bytes.fromhex("3031"),
    bytes.fromhex("40414243"),
    bytes.fromhex("5051525354555657"),
    bytes.fromhex("606162636465666768696a6b6c6d6e6f"),
]

# Root of the tree of the first n test leaves, n = 1..8.
RFC6962_ROOTS = [
    bytes.fromhex(root)
    for root in (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    )
]

# (leaf index, tree size, audit path)
RFC6962_INCLUSION = [
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (0, 1, []),
]

# (old size, new size, consistency proof)
RFC6962_CONSISTENCY = [
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
]

EMPTY_SHA256 = bytes.fromhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")


def reference_root(hasher: TreeHasher, leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH written exactly as RFC 6962 section 2.1 defines it, recursively."""
    n = len(leaf_hashes)
    if n == 0:
        return hasher.empty_root()
    if n == 1:
        return leaf_hashes[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return hasher.hash_children(
        reference_root(hasher, leaf_hashes[:k]), reference_root(hasher, leaf_hashes[k:])
    )


def leaves_for(hasher: TreeHasher, count: int) -> list[bytes]:
    return [hasher.hash_leaf(i.to_bytes(4, "big")) for i in range(count)]


def sm3(data: bytes) -> bytes:
    digest = hashes.Hash(hashes.SM3())
    digest.update(data)
    return digest.finalize()


def flip(node: bytes) -> bytes:
    return bytes((node[0] ^ 0x10,)) + node[1:]


RFC_LEAF_HASHES = [SHA256.hash_leaf(leaf) for leaf in RFC6962_LEAVES]


class TestTreeHasher:
    def test_rfc6962_hashes_are_sha256_with_domain_prefixes(self) -> None:
        assert SHA256.empty_root() == EMPTY_SHA256 == hashlib.sha256(b"").digest()
        assert SHA256.hash_leaf(b"x") == hashlib.sha256(b"\x00x").digest()
        left, right = b"L" * 32, b"R" * 32
        assert SHA256.hash_children(left, right) == hashlib.sha256(b"\x01" + left + right).digest()
        assert (SHA256.name, SHA256.size) == ("sha256", 32)

    def test_sm3_hashes_are_sm3_with_domain_prefixes(self) -> None:
        # SM3 of the empty string, as published with GB/T 32905 implementations.
        expected_empty = "1ab21d8355cfa17f8e61194831e81a8f22bec8c728fefb747ed035eb5082aa2b"
        assert SM3.empty_root().hex() == expected_empty
        assert SM3.hash_leaf(b"abc") == sm3(b"\x00abc")
        assert SM3.hash_children(b"L", b"R") == sm3(b"\x01LR")
        assert (SM3.name, SM3.size) == ("sm3", 32)

    def test_sm3_primitive_matches_the_gbt_32905_example(self) -> None:
        # GB/T 32905-2016 appendix A.1: SM3("abc").
        expected = "66c7f0f462eeedd9d1f2d46bdc10e4e24167c4875cf2f7a2297da02b8f4ba8e0"
        assert sm3(b"abc").hex() == expected

    def test_unknown_algorithm_is_refused(self) -> None:
        with pytest.raises(ValueError, match="unknown Merkle hash algorithm 'md5'"):
            TreeHasher("md5")

    def test_the_default_is_sha256(self) -> None:
        assert TreeHasher() == SHA256
        assert TreeHasher() != SM3


class TestRFC6962Vectors:
    @pytest.mark.parametrize("size", range(1, 9))
    def test_roots(self, size: int) -> None:
        leaves = RFC_LEAF_HASHES[:size]
        expected = RFC6962_ROOTS[size - 1]
        # The published number, our recursive reference, the fast path and the frontier agree.
        assert reference_root(SHA256, leaves) == expected
        assert root_of(SHA256, leaves) == expected
        frontier = Frontier(SHA256)
        for leaf in leaves:
            frontier.append(leaf)
        assert frontier.root() == expected

    def test_empty_tree(self) -> None:
        assert root_of(SHA256, []) == EMPTY_SHA256
        assert Frontier(SHA256).root() == EMPTY_SHA256

    @pytest.mark.parametrize(("index", "size", "path"), RFC6962_INCLUSION)
    def test_inclusion_proofs(self, index: int, size: int, path: list[str]) -> None:
        expected = [bytes.fromhex(node) for node in path]
        leaves = RFC_LEAF_HASHES[:size]
        root = RFC6962_ROOTS[size - 1]
        assert inclusion_proof(SHA256, index, leaves) == expected
        assert verify_inclusion(SHA256, index, size, leaves[index], expected, root)

    @pytest.mark.parametrize(("old", "new", "path"), RFC6962_CONSISTENCY)
    def test_consistency_proofs(self, old: int, new: int, path: list[str]) -> None:
        expected = [bytes.fromhex(node) for node in path]
        old_root, new_root = RFC6962_ROOTS[old - 1], RFC6962_ROOTS[new - 1]
        assert consistency_proof(SHA256, old, RFC_LEAF_HASHES[:new]) == expected
        assert verify_consistency(SHA256, old, new, old_root, new_root, expected)

    @pytest.mark.parametrize(("index", "size", "path"), RFC6962_INCLUSION[:4])
    def test_corrupted_inclusion_proofs_fail(self, index: int, size: int, path: list[str]) -> None:
        proof = [bytes.fromhex(node) for node in path]
        leaf, root = RFC_LEAF_HASHES[index], RFC6962_ROOTS[size - 1]
        wrong = [
            (index - 1, size, leaf, proof, root),
            (index + 1, size, leaf, proof, root),
            (index ^ 2, size, leaf, proof, root),
            (index, size * 2, leaf, proof, root),
            (index, size // 2, leaf, proof, root),
            (index, size, SHA256.hash_leaf(b"wrong"), proof, root),
            (index, size, leaf, proof, EMPTY_SHA256),
            (index, size, leaf, [*proof, root], root),
            (index, size, leaf, [root, *proof], root),
            (index, size, leaf, proof[:-1], root),
            (index, size, leaf, [b""], root),
        ]
        wrong += [
            (index, size, leaf, [*proof[:i], flip(proof[i]), *proof[i + 1 :]], root)
            for i in range(len(proof))
        ]
        for args in wrong:
            assert not verify_inclusion(SHA256, *args), args[:2]

    @pytest.mark.parametrize(("old", "new", "path"), RFC6962_CONSISTENCY[1:])
    def test_corrupted_consistency_proofs_fail(self, old: int, new: int, path: list[str]) -> None:
        proof = [bytes.fromhex(node) for node in path]
        old_root, new_root = RFC6962_ROOTS[old - 1], RFC6962_ROOTS[new - 1]
        wrong = [
            (old - 1, new, old_root, new_root, proof),
            (old + 1, new, old_root, new_root, proof),
            (old ^ 2, new, old_root, new_root, proof),
            (old, new * 2, old_root, new_root, proof),
            (old, new // 2, old_root, new_root, proof),
            (old, new, new_root, old_root, proof),
            (old, new, EMPTY_SHA256, new_root, proof),
            (old, new, old_root, EMPTY_SHA256, proof),
            (old, new, old_root, new_root, []),
            (old, new, old_root, new_root, [*proof, old_root]),
            (old, new, old_root, new_root, [*proof, new_root]),
            (old, new, old_root, new_root, [old_root, *proof]),
            (old, new, old_root, new_root, [proof[0], *proof]),
            (old, new, old_root, new_root, proof[:-1]),
        ]
        wrong += [
            (old, new, old_root, new_root, [*proof[:i], flip(proof[i]), *proof[i + 1 :]])
            for i in range(len(proof))
        ]
        for args in wrong:
            assert not verify_consistency(SHA256, *args), args[:2]


class TestEdgeCases:
    def test_single_leaf_tree_has_an_empty_path(self) -> None:
        leaf = SHA256.hash_leaf(b"data")
        assert root_of(SHA256, [leaf]) == leaf
        assert inclusion_proof(SHA256, 0, [leaf]) == []
        assert verify_inclusion(SHA256, 0, 1, leaf, [], leaf)
        # Hashes of the wrong length never verify, even when they are equal.
        assert not verify_inclusion(SHA256, 0, 1, b"", [], b"")

    @pytest.mark.parametrize(("index", "size"), [(0, 0), (1, 0), (1, 1), (2, 1), (-1, 4)])
    def test_inclusion_outside_the_tree_fails(self, index: int, size: int) -> None:
        assert not verify_inclusion(SHA256, index, size, EMPTY_SHA256, [], EMPTY_SHA256)

    def test_inclusion_proof_of_a_missing_leaf_is_refused(self) -> None:
        with pytest.raises(ValueError, match="leaf 3 is not in a tree of 3 leaves"):
            inclusion_proof(SHA256, 3, leaves_for(SHA256, 3))
        with pytest.raises(ValueError, match="leaf -1"):
            inclusion_proof(SHA256, -1, leaves_for(SHA256, 3))

    def test_consistency_proof_beyond_the_tree_is_refused(self) -> None:
        with pytest.raises(ValueError, match="old size 4"):
            consistency_proof(SHA256, 4, leaves_for(SHA256, 3))
        with pytest.raises(ValueError, match="old size -1"):
            consistency_proof(SHA256, -1, leaves_for(SHA256, 3))

    def test_consistency_edge_sizes(self) -> None:
        leaves = leaves_for(SHA256, 5)
        root = root_of(SHA256, leaves)
        empty = SHA256.empty_root()
        assert consistency_proof(SHA256, 0, leaves) == []
        assert consistency_proof(SHA256, 5, leaves) == []
        assert verify_consistency(SHA256, 0, 0, empty, empty, [])
        assert verify_consistency(SHA256, 0, 5, empty, root, [])
        assert verify_consistency(SHA256, 5, 5, root, root, [])
        assert not verify_consistency(SHA256, 0, 5, root, root, [])  # not the empty root
        assert not verify_consistency(SHA256, 5, 5, root, empty, [])
        assert not verify_consistency(SHA256, 5, 5, root, root, [root])
        assert not verify_consistency(SHA256, 0, 5, empty, root, [root])
        assert not verify_consistency(SHA256, 5, 4, root, root, [])  # time travel
        assert not verify_consistency(SHA256, -1, 4, root, root, [])


class TestFrontier:
    def test_append_keeps_one_hash_per_set_bit(self) -> None:
        frontier = Frontier(SHA256)
        leaves = leaves_for(SHA256, 13)
        for leaf in leaves:
            frontier.append(leaf)
        # 13 = 8 + 4 + 1: the roots of leaves [0, 8), [8, 12) and [12, 13).
        assert frontier.size == 13
        assert frontier.hashes == (
            root_of(SHA256, leaves[:8]),
            root_of(SHA256, leaves[8:12]),
            leaves[12],
        )

    def test_storage_round_trip(self) -> None:
        frontier = Frontier(SM3)
        for leaf in leaves_for(SM3, 300):
            frontier.append(leaf)
        restored = Frontier.from_bytes(SM3, frontier.to_bytes())
        assert restored == frontier
        assert restored.root() == frontier.root()
        # Appending after a restore continues the same tree.
        extra = SM3.hash_leaf(b"next")
        frontier.append(extra)
        restored.append(extra)
        assert restored.root() == frontier.root() == root_of(SM3, [*leaves_for(SM3, 300), extra])

    def test_empty_frontier_round_trip(self) -> None:
        restored = Frontier.from_bytes(SHA256, Frontier(SHA256).to_bytes())
        assert (restored.size, restored.hashes) == (0, ())

    def test_storage_names_its_hash_function(self) -> None:
        stored = Frontier(SHA256, 1, [EMPTY_SHA256]).to_bytes()
        with pytest.raises(ValueError, match="uses 'sha256', not 'sm3'"):
            Frontier.from_bytes(SM3, stored)

    @pytest.mark.parametrize(
        "damage",
        [
            lambda data: data[:-1],
            lambda data: data + b"\x00",
            lambda data: data[:10],
            lambda data: b"\x02" + data[1:],
            lambda data: b"",
        ],
    )
    def test_damaged_storage_is_refused(self, damage: Callable[[bytes], bytes]) -> None:
        frontier = Frontier(SHA256)
        for leaf in leaves_for(SHA256, 7):
            frontier.append(leaf)
        with pytest.raises(ValueError, match="frontier"):
            Frontier.from_bytes(SHA256, damage(frontier.to_bytes()))

    def test_inconsistent_state_is_refused(self) -> None:
        with pytest.raises(ValueError, match="size 3 has 2 hashes, got 1"):
            Frontier(SHA256, 3, [EMPTY_SHA256])
        with pytest.raises(ValueError, match="cannot be negative"):
            Frontier(SHA256, -1)
        with pytest.raises(ValueError, match="32 bytes"):
            Frontier(SHA256, 1, [b"short"])
        with pytest.raises(ValueError, match="32 bytes"):
            Frontier(SHA256).append(b"short")

    def test_hashes_are_a_copy(self) -> None:
        frontier = Frontier(SHA256, 1, [EMPTY_SHA256])
        assert isinstance(frontier.hashes, tuple)
        assert repr(frontier) == "Frontier('sha256', size=1)"


class TestProperties:
    @settings(max_examples=60, deadline=None)
    @given(size=st.integers(min_value=0, max_value=300), seed=st.binary(max_size=8))
    def test_frontier_root_of_and_reference_agree(self, size: int, seed: bytes) -> None:
        leaves = [SHA256.hash_leaf(seed + i.to_bytes(2, "big")) for i in range(size)]
        frontier = Frontier(SHA256)
        for leaf in leaves:
            frontier.append(leaf)
        expected = reference_root(SHA256, leaves)
        assert root_of(SHA256, leaves) == expected
        assert frontier.root() == expected
        assert frontier.size == size

    @settings(max_examples=60, deadline=None)
    @given(data=st.data(), size=st.integers(min_value=1, max_value=300))
    def test_every_inclusion_proof_verifies_and_only_for_its_leaf(
        self, data: st.DataObject, size: int
    ) -> None:
        leaves = leaves_for(SHA256, size)
        root = root_of(SHA256, leaves)
        index = data.draw(st.integers(min_value=0, max_value=size - 1), label="index")
        proof = inclusion_proof(SHA256, index, leaves)
        assert verify_inclusion(SHA256, index, size, leaves[index], proof, root)

        other = data.draw(st.integers(min_value=0, max_value=size - 1), label="other")
        if other != index:
            assert not verify_inclusion(SHA256, other, size, leaves[index], proof, root)
            assert not verify_inclusion(SHA256, index, size, leaves[other], proof, root)
        assert not verify_inclusion(SHA256, index, size, SHA256.hash_leaf(b"?"), proof, root)
        assert not verify_inclusion(SHA256, index, size, leaves[index], proof, flip(root))
        # No check with another tree size: where the audit path has the same shape (leaf 0
        # of 3 and of 4 leaves) the proof verifies, as in every RFC 9162 verifier. The tree
        # size is bound by the signed checkpoint, never taken from the proof's sender.
        if proof:
            position = data.draw(st.integers(min_value=0, max_value=len(proof) - 1))
            tampered = [*proof[:position], flip(proof[position]), *proof[position + 1 :]]
            assert not verify_inclusion(SHA256, index, size, leaves[index], tampered, root)
            assert not verify_inclusion(SHA256, index, size, leaves[index], proof[:-1], root)
        assert not verify_inclusion(SHA256, index, size, leaves[index], [*proof, root], root)

    def test_every_inclusion_proof_of_small_trees(self) -> None:
        for size in range(1, 65):
            leaves = leaves_for(SHA256, size)
            root = root_of(SHA256, leaves)
            for index in range(size):
                proof = inclusion_proof(SHA256, index, leaves)
                assert verify_inclusion(SHA256, index, size, leaves[index], proof, root)

    def test_every_consistency_proof_up_to_64(self) -> None:
        leaves = leaves_for(SHA256, 64)
        roots = [root_of(SHA256, leaves[:size]) for size in range(65)]
        for new in range(65):
            for old in range(new + 1):
                proof = consistency_proof(SHA256, old, leaves[:new])
                assert verify_consistency(SHA256, old, new, roots[old], roots[new], proof)
                if not proof:
                    continue
                for i in range(len(proof)):
                    tampered = [*proof[:i], flip(proof[i]), *proof[i + 1 :]]
                    assert not verify_consistency(
                        SHA256, old, new, roots[old], roots[new], tampered
                    )
                assert not verify_consistency(SHA256, old, new, roots[old], roots[new], proof[:-1])
                assert not verify_consistency(
                    SHA256, old, new, roots[old], roots[new], [*proof, roots[old]]
                )
                assert not verify_consistency(SHA256, old, new, flip(roots[old]), roots[new], proof)
                assert not verify_consistency(SHA256, old, new, roots[old], flip(roots[new]), proof)
                for wrong_old in (old - 1, old + 1):
                    if 0 < wrong_old < new:
                        assert not verify_consistency(
                            SHA256, wrong_old, new, roots[old], roots[new], proof
                        )

    @settings(max_examples=30, deadline=None)
    @given(data=st.data(), new=st.integers(min_value=2, max_value=200))
    def test_consistency_proofs_of_a_changed_history_fail(
        self, data: st.DataObject, new: int
    ) -> None:
        leaves = leaves_for(SHA256, new)
        old = data.draw(st.integers(min_value=1, max_value=new - 1), label="old")
        changed_at = data.draw(st.integers(min_value=0, max_value=old - 1), label="changed")
        rewritten = list(leaves)
        rewritten[changed_at] = SHA256.hash_leaf(b"rewritten")
        # A log that rewrote an old entry cannot prove the old checkpoint is its prefix.
        proof = consistency_proof(SHA256, old, rewritten)
        assert not verify_consistency(
            SHA256, old, new, root_of(SHA256, leaves[:old]), root_of(SHA256, rewritten), proof
        )


class TestSM3:
    def test_sm3_tree_is_a_different_tree(self) -> None:
        data = [bytes((i,)) for i in range(9)]
        sha_leaves = [SHA256.hash_leaf(item) for item in data]
        sm3_leaves = [SM3.hash_leaf(item) for item in data]
        sm3_root = root_of(SM3, sm3_leaves)
        assert sm3_root != root_of(SHA256, sha_leaves)
        assert sm3_root == reference_root(SM3, sm3_leaves)

    def test_sm3_proofs_verify(self) -> None:
        leaves = leaves_for(SM3, 37)
        root = root_of(SM3, leaves)
        for index in (0, 17, 36):
            proof = inclusion_proof(SM3, index, leaves)
            assert verify_inclusion(SM3, index, 37, leaves[index], proof, root)
            # A proof is only good for the hash function it was made with.
            assert not verify_inclusion(SHA256, index, 37, leaves[index], proof, root)
        proof = consistency_proof(SM3, 20, leaves)
        assert verify_consistency(SM3, 20, 37, root_of(SM3, leaves[:20]), root, proof)
