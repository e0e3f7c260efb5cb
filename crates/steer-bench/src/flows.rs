//! Per-flow bookkeeping of the checker: what was sent, which sequence
//! numbers came back, how many twice, how many out of order.
//!
//! Invariants: a flow's sequence numbers are handed out consecutively from 0
//! ([`FlowBook::next_seq`](crate::flows::FlowBook::next_seq)); a reply counts as answered the first time its
//! sequence number comes back, as duplicated every later time, and as
//! reordered when a higher sequence number of the same flow came back
//! before it. "Before" is by arrival time when the reply carries one
//! ([`FlowBook::reply_at`](crate::flows::FlowBook::reply_at)): the checker reads its rx queues one after the
//! other, and a flow whose replies switch queues (the server moved it to a
//! worker that sends on another queue) may be read out of arrival order.
//! A reply for a sequence number never sent is `bogus`.

use serde::Serialize;

/// Counts of one flow (or a sum of flows).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FlowCounts {
    /// Requests sent.
    pub sent: u64,
    /// Distinct requests answered.
    pub answered: u64,
    /// Requests never answered (sent - answered).
    pub lost: u64,
    /// Replies for a request already answered.
    pub duplicated: u64,
    /// Replies that came after a reply to a later request of the same flow.
    pub reordered: u64,
    /// Replies naming a sequence number that was never sent.
    pub bogus: u64,
}

impl std::ops::AddAssign for FlowCounts {
    fn add_assign(&mut self, o: Self) {
        self.sent += o.sent;
        self.answered += o.answered;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.reordered += o.reordered;
        self.bogus += o.bogus;
    }
}

/// The state of one flow.
#[derive(Debug, Clone, Default)]
pub struct FlowBook {
    next: u64,
    seen: Vec<u64>,
    highest: Option<u64>,
    /// When the reply to `highest` arrived (`u64::MAX`: unknown).
    highest_at: u64,
    counts: FlowCounts,
}

/// What a reply turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// First reply to this request, in order.
    InOrder,
    /// First reply to this request, after a later one.
    Reordered,
    /// Another reply to an answered request.
    Duplicate,
    /// Never sent.
    Bogus,
}

impl FlowBook {
    /// The sequence number of the next request (and counts it as sent).
    #[inline]
    pub fn next_seq(&mut self) -> u64 {
        let s = self.next;
        self.next += 1;
        self.counts.sent += 1;
        s
    }

    /// Takes back the last `n` sequence numbers handed out (not sent after all).
    pub fn unsend(&mut self, n: u64) {
        let n = n.min(self.next);
        self.next -= n;
        self.counts.sent -= n;
    }

    /// Records a reply to request `seq`, arrival time unknown: it is
    /// reordered when a higher sequence number was recorded before it.
    #[inline]
    pub fn reply(&mut self, seq: u64) -> Verdict {
        self.reply_at(seq, u64::MAX)
    }

    /// Records a reply to request `seq` that arrived at `at` (ns, any clock
    /// the flow's replies share; 0 or `u64::MAX`: unknown). A reply to a
    /// lower sequence number than one recorded before is reordered only if
    /// it did not arrive strictly before that one.
    #[inline]
    pub fn reply_at(&mut self, seq: u64, at: u64) -> Verdict {
        let at = if at == 0 { u64::MAX } else { at };
        if seq >= self.next {
            self.counts.bogus += 1;
            return Verdict::Bogus;
        }
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        if word >= self.seen.len() {
            self.seen.resize(word + 1 + self.seen.len() / 2, 0);
        }
        if self.seen[word] & (1 << bit) != 0 {
            self.counts.duplicated += 1;
            return Verdict::Duplicate;
        }
        self.seen[word] |= 1 << bit;
        self.counts.answered += 1;
        match self.highest {
            // Read after a later reply, but it arrived first: in order.
            Some(h) if seq < h && at < self.highest_at && self.highest_at != u64::MAX => {
                Verdict::InOrder
            }
            Some(h) if seq < h => {
                self.counts.reordered += 1;
                Verdict::Reordered
            }
            _ => {
                self.highest = Some(seq);
                self.highest_at = at;
                Verdict::InOrder
            }
        }
    }

    /// The counts so far (lost = sent - answered).
    pub fn counts(&self) -> FlowCounts {
        FlowCounts {
            lost: self.counts.sent - self.counts.answered,
            ..self.counts
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_lost_duplicated_reordered_bogus() {
        let mut f = FlowBook::default();
        for _ in 0..200 {
            f.next_seq();
        }
        assert_eq!(f.reply(0), Verdict::InOrder);
        assert_eq!(f.reply(2), Verdict::InOrder); // 1 still missing: not reordered yet
        assert_eq!(f.reply(1), Verdict::Reordered);
        assert_eq!(f.reply(2), Verdict::Duplicate);
        assert_eq!(f.reply(150), Verdict::InOrder);
        assert_eq!(f.reply(200), Verdict::Bogus);
        let c = f.counts();
        assert_eq!(
            c,
            FlowCounts {
                sent: 200,
                answered: 4,
                lost: 196,
                duplicated: 1,
                reordered: 1,
                bogus: 1
            }
        );
    }

    #[test]
    fn order_is_by_arrival_time_when_known() {
        let mut f = FlowBook::default();
        for _ in 0..4 {
            f.next_seq();
        }
        // Reply 1 is read first, but reply 0 arrived before it: in order.
        assert_eq!(f.reply_at(1, 200), Verdict::InOrder);
        assert_eq!(f.reply_at(0, 100), Verdict::InOrder);
        // Reply 2 arrived after reply 3: reordered.
        assert_eq!(f.reply_at(3, 300), Verdict::InOrder);
        assert_eq!(f.reply_at(2, 400), Verdict::Reordered);
        // Unknown arrival times fall back to reading order.
        let mut g = FlowBook::default();
        g.next_seq();
        g.next_seq();
        assert_eq!(g.reply_at(1, 0), Verdict::InOrder);
        assert_eq!(g.reply_at(0, 50), Verdict::Reordered);
        assert_eq!(f.counts().reordered, 1);
    }

    #[test]
    fn unsend_returns_sequence_numbers() {
        let mut f = FlowBook::default();
        for _ in 0..5 {
            f.next_seq();
        }
        f.unsend(2);
        assert_eq!(f.counts().sent, 3);
        assert_eq!(f.next_seq(), 3);
        assert_eq!(f.reply(4), Verdict::Bogus);
    }
}
