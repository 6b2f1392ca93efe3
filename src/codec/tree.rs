//! The whole stream's BLAKE3, assembled from its blocks' subtree hashes.
//!
//! A pipe transfer hashes every byte once per side: each block's BLAKE3 *chaining value*
//! (the hash of its subtree of the BLAKE3 tree, `blake3::hazmat`) both authenticates the
//! block (the unit's keyed hash covers it, see [`stream_unit_hash`]) and feeds the hash of
//! the whole stream, which is merged from the chaining values in order. The result is the
//! standard BLAKE3 of the stream (what `b3sum` prints), so a user can check a stored copy.
//!
//! This only holds when every block but the last has the same power-of-two size of at
//! least one BLAKE3 chunk (1 KiB) and starts at a multiple of it: then each block is a
//! complete subtree of the stream's tree, and merging them the way BLAKE3's own
//! incremental hasher merges chunks rebuilds the tree exactly. Pipe mode's blocks are
//! such (the sender rounds `--block-size` down to a power of two; the receiver refuses
//! other sizes). A stream of one block has no parent node: its hash is that block's root
//! hash, which the first block's holder computes directly ([`TreeHash::first`]).

use blake3::hazmat::{merge_subtrees_non_root, merge_subtrees_root, HasherExt, Mode};

/// A block's chaining value: the non-root BLAKE3 of its bytes at their stream offset.
pub type BlockCv = [u8; 32];

/// Whether `block` can be a pipe block size: a power of two of at least one chunk.
pub fn is_tree_block(block: u64) -> bool {
    block.is_power_of_two() && block >= blake3::CHUNK_LEN as u64
}

/// Whether `len` bytes at `offset` can be a block: not empty, at a chunk boundary, and
/// no longer than the subtree starting there (hashing anything else would panic).
pub fn fits(offset: u64, len: usize) -> bool {
    len > 0
        && offset % blake3::CHUNK_LEN as u64 == 0
        && blake3::hazmat::max_subtree_len(offset).is_none_or(|m| len as u64 <= m)
}

/// The chaining value of `raw`, the bytes of the stream at `offset`. `offset` is a
/// multiple of the (power-of-two) block size and `raw` at most one block, not empty.
pub fn block_cv(offset: u64, raw: &[u8]) -> BlockCv {
    debug_assert!(!raw.is_empty() && offset % blake3::CHUNK_LEN as u64 == 0);
    let mut h = blake3::Hasher::new();
    h.set_input_offset(offset);
    h.update(raw);
    h.finalize_non_root()
}

/// The keyed hash that authenticates one stream block: the unit's header bytes (see
/// `protocol::hashed_parts`) and the block's chaining value, which stands for its bytes
/// (finding other bytes with the same chaining value is breaking BLAKE3).
pub fn stream_unit_hash(key: &[u8; 32], header: [&[u8]; 2], cv: &BlockCv) -> [u8; 32] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(header[0]).update(header[1]).update(cv);
    *h.finalize().as_bytes()
}

/// Merges block chaining values, in stream order, into the stream's BLAKE3.
#[derive(Default)]
pub struct TreeHash {
    /// Complete subtrees still waiting for a right sibling, left to right.
    stack: Vec<BlockCv>,
    /// The newest block's value: merged only once another block follows, because the
    /// last block's parents are the ones that become the root.
    pending: Option<BlockCv>,
    /// Blocks pushed.
    blocks: u64,
    /// The root hash of the first block, for a stream that turns out to be one block.
    first: Option<[u8; 32]>,
}

impl TreeHash {
    /// An empty stream's state.
    pub fn new() -> TreeHash {
        TreeHash::default()
    }

    /// The first block's bytes (offset 0): kept as its root hash in case no other block
    /// follows. One block's hashing per stream, not per block.
    pub fn first(&mut self, raw: &[u8]) {
        self.first = Some(*blake3::hash(raw).as_bytes());
    }

    /// The next block's chaining value, in stream order.
    pub fn push(&mut self, cv: BlockCv) {
        if let Some(mut left) = self.pending.take() {
            // `left` is block number `blocks` (1-based): merge it with every completed
            // left sibling, as BLAKE3's incremental hasher merges chunks.
            let mut total = self.blocks;
            while total & 1 == 0 {
                let Some(l) = self.stack.pop() else { break };
                left = merge_subtrees_non_root(&l, &left, Mode::Hash);
                total >>= 1;
            }
            self.stack.push(left);
        }
        self.pending = Some(cv);
        self.blocks += 1;
    }

    /// Blocks pushed so far.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// The stream's BLAKE3; `None` when it was one block and [`TreeHash::first`] was not
    /// given its bytes.
    pub fn finish(mut self) -> Option<[u8; 32]> {
        let Some(mut right) = self.pending.take() else {
            return Some(*blake3::hash(b"").as_bytes());
        };
        if self.blocks == 1 {
            return self.first;
        }
        while self.stack.len() > 1 {
            let Some(l) = self.stack.pop() else { break };
            right = merge_subtrees_non_root(&l, &right, Mode::Hash);
        }
        let left = self.stack.pop()?;
        Some(*merge_subtrees_root(&left, &right, Mode::Hash).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Compression, Decoder, Encoder, VerifyError};
    use crate::protocol::{encode_data_header, hashed_parts, set_hash, Codec, DataHeader, Segment};
    use proptest::prelude::*;

    /// The stream's hash the way pipe mode builds it, from blocks of `block` bytes.
    fn tree(data: &[u8], block: usize) -> [u8; 32] {
        let mut t = TreeHash::new();
        for (i, b) in data.chunks(block).enumerate() {
            if i == 0 {
                t.first(b);
            }
            t.push(block_cv((i * block) as u64, b));
        }
        t.finish().expect("first block given")
    }

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| {
                (i as u32)
                    .wrapping_mul(2654435761)
                    .wrapping_add(seed as u32) as u8
            })
            .collect()
    }

    #[test]
    fn equals_blake3_at_the_edges() {
        let block = 4096;
        for n in [
            0,
            1,
            1024,
            1025,
            block - 1,
            block,
            block + 1,
            2 * block,
            3 * block,
            3 * block + 7,
            4 * block,
            5 * block - 1,
            7 * block,
            8 * block,
            9 * block + 1,
            16 * block + 1024,
        ] {
            let d = bytes(n, 9);
            assert_eq!(tree(&d, block), *blake3::hash(&d).as_bytes(), "length {n}");
        }
    }

    #[test]
    fn one_block_without_its_bytes_has_no_hash() {
        let mut t = TreeHash::new();
        t.push(block_cv(0, b"abc"));
        assert_eq!(t.finish(), None);
    }

    #[test]
    fn the_unit_hash_depends_on_key_header_and_value() {
        let cv = block_cv(0, &bytes(5000, 1));
        let h = stream_unit_hash(&[1; 32], [b"ab", b"c"], &cv);
        assert_ne!(h, stream_unit_hash(&[2; 32], [b"ab", b"c"], &cv));
        assert_ne!(h, stream_unit_hash(&[1; 32], [b"ab", b"d"], &cv));
        assert_ne!(
            h,
            stream_unit_hash(&[1; 32], [b"ab", b"c"], &block_cv(0, &bytes(5000, 2)))
        );
        assert_ne!(
            cv,
            block_cv(8192, &bytes(5000, 1)),
            "the offset is part of the value"
        );
    }

    #[test]
    fn block_sizes() {
        assert!(is_tree_block(1 << 16) && is_tree_block(4 << 20) && is_tree_block(1024));
        assert!(!is_tree_block(3 << 20) && !is_tree_block(512) && !is_tree_block(0));
    }

    /// A stream block's data payload as a sender seals it.
    fn sealed(key: &[u8; 32], offset: u64, raw: &[u8], mode: Compression) -> Vec<u8> {
        let mut cbuf = Vec::new();
        let mut enc = Encoder::new(mode, 1);
        let (codec, packed) = enc.encode(raw, &mut cbuf);
        let body: &[u8] = if codec == Codec::Raw { raw } else { packed };
        let seg = [Segment {
            file: 0,
            offset,
            len: raw.len() as u32,
            keep: false,
        }];
        let mut p = Vec::new();
        encode_data_header(&mut p, codec, raw.len() as u32, &seg);
        let hash = stream_unit_hash(key, hashed_parts(&p), &block_cv(offset, raw));
        set_hash(&mut p, &hash);
        p.extend_from_slice(body);
        p
    }

    #[test]
    fn a_stream_block_decodes_into_a_recycled_buffer_and_verifies() {
        let key = [7u8; 32];
        let raw: Vec<u8> = b"stream ".iter().copied().cycle().take(70_000).collect();
        for mode in [Compression::None, Compression::Lz4, Compression::Zstd(1)] {
            let p = sealed(&key, 1 << 17, &raw, mode);
            let h = DataHeader::parse(&p).unwrap();
            let mut out = vec![0xee; 100_000];
            let cv = Decoder::new(key)
                .decode_stream_into(&h, 1 << 17, &mut out)
                .unwrap();
            assert_eq!(out, raw, "{mode}");
            assert_eq!(cv, block_cv(1 << 17, &raw));
            // Another key, or another place in the stream, does not verify.
            let wrong = Decoder::new([8u8; 32]).decode_stream_into(&h, 1 << 17, &mut out);
            assert_eq!(wrong, Err(VerifyError::HashMismatch));
            let moved = Decoder::new(key).decode_stream_into(&h, 2 << 17, &mut out);
            assert_eq!(moved, Err(VerifyError::HashMismatch));
        }
    }

    #[test]
    fn a_stream_block_decoded_at_an_offset_in_its_buffer_is_the_same_block() {
        let key = [7u8; 32];
        let raw: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + i / 300) as u8).collect();
        for mode in [Compression::None, Compression::Lz4, Compression::Zstd(1)] {
            let p = sealed(&key, 1 << 17, &raw, mode);
            let h = DataHeader::parse(&p).unwrap();
            // A recycled buffer, longer than needed, its old bytes still in it.
            for at in [0, 1, 4095] {
                let mut out = vec![0xee; 100_000];
                let cv = Decoder::new(key)
                    .decode_stream_at(&h, 1 << 17, &mut out, at)
                    .unwrap();
                assert_eq!(out.len(), at + raw.len(), "{mode} at {at}");
                assert!(out[at..] == raw[..], "{mode} at {at}");
                assert!(
                    out[..at].iter().all(|&b| b == 0xee),
                    "before `at`: left alone"
                );
                assert_eq!(cv, block_cv(1 << 17, &raw));
                let wrong = Decoder::new([8u8; 32]).decode_stream_at(&h, 1 << 17, &mut out, at);
                assert_eq!(wrong, Err(VerifyError::HashMismatch));
            }
        }
    }

    #[test]
    fn blocks_that_fit_no_subtree_are_refused_without_hashing() {
        let key = [7u8; 32];
        let raw = vec![1u8; 5000];
        let p = sealed(&key, 8192, &raw, Compression::None);
        let h = DataHeader::parse(&p).unwrap();
        let mut out = Vec::new();
        let mut d = Decoder::new(key);
        // Misaligned, or longer than the subtree at that offset holds: would panic in
        // blake3's hazmat if hashed.
        assert_eq!(
            d.decode_stream_into(&h, 100, &mut out),
            Err(VerifyError::Decompress)
        );
        assert_eq!(
            d.decode_stream_into(&h, 4096, &mut out),
            Err(VerifyError::Decompress)
        );
        assert!(d.decode_stream_into(&h, 8192, &mut out).is_ok());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn stream_block_decoding_never_panics(
            body in proptest::collection::vec(any::<u8>(), 0..3000),
            raw_len in 0u32..5000,
            codec in 0u8..3,
            offset in prop_oneof![Just(0u64), 0u64..1_000_000, Just(1u64 << 40)],
        ) {
            let codec = [Codec::Raw, Codec::Lz4, Codec::Zstd][codec as usize];
            let mut p = Vec::new();
            let seg = [Segment { file: 0, offset, len: raw_len, keep: false }];
            encode_data_header(&mut p, codec, raw_len, &seg);
            p.extend_from_slice(&body);
            if let Ok(h) = DataHeader::parse(&p) {
                let mut out = Vec::new();
                prop_assert!(Decoder::new([0u8; 32]).decode_stream_into(&h, offset, &mut out).is_err());
            }
        }

        #[test]
        fn any_stream_hashes_as_blake3(n in 0usize..70_000, shift in 10u32..14, seed: u8) {
            let d = bytes(n, seed);
            prop_assert_eq!(tree(&d, 1usize << shift), *blake3::hash(&d).as_bytes());
        }
    }
}
