//! The running means the adaptive codec's controller keeps (see `codec::tune`), and the
//! number of levels it keeps them for. Pure arithmetic, shared by the tuner and its
//! delivery samples.

/// How many levels the controller chooses among (`tune::LADDER`).
pub(super) const LEVELS: usize = 5;

/// What a running mean keeps of its past at each new sample of a unit: a time constant
/// of about ten units (a second or two at 100 Mbit/s; single units are noisy: a write
/// into a socket buffer with room returns at once, the next one waits for the link).
pub(super) const KEEP: f64 = 0.9;

/// A running mean of a rate: decaying sums of a quantity and of the bytes it was measured
/// over, so a big unit counts more than a small one and one odd sample cannot swing it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mean {
    pub(super) num: f64,
    pub(super) den: f64,
    prior: f64,
}

impl Mean {
    pub(super) fn new(prior: f64) -> Mean {
        Mean {
            num: 0.0,
            den: 0.0,
            prior,
        }
    }

    pub(super) fn add(&mut self, num: f64, den: f64, keep: f64) {
        self.num = self.num * keep + num;
        self.den = self.den * keep + den;
    }

    /// Keeps the mean but lets it count for at most `den` bytes.
    pub(super) fn cap(&mut self, den: f64) {
        if self.den > den {
            self.num *= den / self.den;
            self.den = den;
        }
    }

    pub(super) fn get(&self) -> f64 {
        if self.den > 0.0 {
            self.num / self.den
        } else {
            self.prior
        }
    }
}
