//! Paced writes: a [`Gate`] is paid for each piece of a write before the piece goes to the
//! socket, so a 4 MiB frame under a low bandwidth cap leaves as a trickle of small pieces
//! spread over its time, not as one burst at line speed after a single payment. What pays
//! (the sender's bandwidth cap) lives above this layer; here only the pieces are cut.

use std::io::{self, IoSlice, Write};

/// What pays for the pieces of a write.
pub trait Pay {
    /// Returns once `n` more bytes may go.
    fn pay(&self, n: usize);
}

impl<F: Fn(usize)> Pay for F {
    fn pay(&self, n: usize) {
        self(n)
    }
}

/// Lets a write go in pieces of at most `slice` bytes, each paid for at `pay` first.
pub struct Gate<'a> {
    slice: usize,
    pay: &'a dyn Pay,
}

impl<'a> Gate<'a> {
    /// A gate that lets at most `slice` bytes go per payment (at least one).
    pub fn new(slice: usize, pay: &'a dyn Pay) -> Gate<'a> {
        Gate {
            slice: slice.max(1),
            pay,
        }
    }

    /// Pays for the next piece of a write with `remaining` bytes left: its length.
    pub(super) fn next(&self, remaining: usize) -> usize {
        let n = remaining.min(self.slice);
        self.pay.pay(n);
        n
    }
}

impl std::fmt::Debug for Gate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gate({})", self.slice)
    }
}

/// Writes every part to `w` in order, each piece of it paid for at `gate` before it goes.
pub(super) fn write_all_gated<W: Write + ?Sized>(
    w: &mut W,
    parts: &[&[u8]],
    gate: &Gate<'_>,
) -> io::Result<()> {
    for part in parts {
        let mut rest = *part;
        while !rest.is_empty() {
            let n = gate.next(rest.len());
            w.write_all(&rest[..n])?;
            rest = &rest[n..];
        }
    }
    Ok(())
}

/// The first `limit` bytes of `bufs`, as slices for one gathering write.
pub(super) fn prefix<'a>(bufs: &'a [IoSlice<'_>], limit: usize) -> Vec<IoSlice<'a>> {
    let mut out = Vec::new();
    let mut left = limit;
    for b in bufs {
        if left == 0 {
            break;
        }
        let n = b.len().min(left);
        out.push(IoSlice::new(&b[..n]));
        left -= n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn a_gated_write_pays_for_every_piece_before_it_goes() {
        let paid = RefCell::new(Vec::new());
        let pay = |n| paid.borrow_mut().push(n);
        let gate = Gate::new(1000, &pay);
        let mut out = Vec::new();
        let a = vec![1u8; 2500];
        let b = vec![2u8; 10];
        write_all_gated(&mut out, &[&a, &[], &b], &gate).unwrap();
        assert_eq!(*paid.borrow(), vec![1000, 1000, 500, 10]);
        assert_eq!(out, [a, b].concat());
    }

    #[test]
    fn a_prefix_takes_whole_slices_then_part_of_one() {
        let (a, b, c) = ([1u8; 3], [2u8; 4], [3u8; 5]);
        let bufs = [IoSlice::new(&a), IoSlice::new(&b), IoSlice::new(&c)];
        let p = prefix(&bufs, 5);
        let got: Vec<u8> = p.iter().flat_map(|s| s.iter().copied()).collect();
        assert_eq!(got, [1, 1, 1, 2, 2]);
        assert_eq!(prefix(&bufs, 100).len(), 3);
        assert!(prefix(&bufs, 0).is_empty());
    }
}
