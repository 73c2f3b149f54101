//! The event queue: a timing wheel of 1 ms slots over the next ~17 minutes (every SQS delay,
//! visibility timeout and invocation fits in it), with a binary heap for events further out.
//! Push and pop are O(1) for the wheel, which holds nearly every event; events of the same
//! millisecond come out in the order they were pushed, so runs are reproducible.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

const SLOTS: u64 = 1 << 20;

#[derive(Debug)]
pub(crate) struct Wheel<E> {
    slots: Vec<Vec<E>>,
    /// One bit per slot: whether it holds events (lets the clock skip empty stretches).
    bits: Vec<u64>,
    now: u64,
    in_wheel: usize,
    overflow: BinaryHeap<Reverse<(u64, u64, E)>>,
    seq: u64,
    current: Vec<E>,
    next: usize,
}

impl<E: Copy + Ord> Wheel<E> {
    pub(crate) fn new() -> Wheel<E> {
        Wheel {
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            bits: vec![0; (SLOTS / 64) as usize],
            now: 0,
            in_wheel: 0,
            overflow: BinaryHeap::new(),
            seq: 0,
            current: Vec::new(),
            next: 0,
        }
    }

    /// Schedules `ev` at `t` (never earlier than the current time).
    pub(crate) fn push(&mut self, t: u64, ev: E) {
        let t = t.max(self.now);
        if t - self.now < SLOTS {
            self.put(t, ev);
        } else {
            self.seq += 1;
            self.overflow.push(Reverse((t, self.seq, ev)));
        }
    }

    fn put(&mut self, t: u64, ev: E) {
        let slot = (t % SLOTS) as usize;
        self.slots[slot].push(ev);
        self.bits[slot / 64] |= 1 << (slot % 64);
        self.in_wheel += 1;
    }

    /// Milliseconds from now to the next non-empty slot (the wheel must not be empty).
    fn distance_to_next(&self) -> u64 {
        let start = (self.now % SLOTS) as usize;
        let words = self.bits.len();
        let first = self.bits[start / 64] & (!0u64 << (start % 64));
        if first != 0 {
            return (start / 64 * 64 + first.trailing_zeros() as usize - start) as u64;
        }
        for k in 1..=words {
            let w = (start / 64 + k) % words;
            if self.bits[w] != 0 {
                let slot = w * 64 + self.bits[w].trailing_zeros() as usize;
                return ((slot + SLOTS as usize - start) % SLOTS as usize) as u64;
            }
        }
        1
    }

    fn migrate(&mut self) {
        while let Some(Reverse((t, _, _))) = self.overflow.peek() {
            if *t - self.now >= SLOTS {
                break;
            }
            if let Some(Reverse((t, _, ev))) = self.overflow.pop() {
                self.put(t, ev);
            }
        }
    }

    /// The next event and its time.
    pub(crate) fn pop(&mut self) -> Option<(u64, E)> {
        loop {
            if let Some(ev) = self.current.get(self.next) {
                self.next += 1;
                return Some((self.now, *ev));
            }
            let slot = &mut self.slots[(self.now % SLOTS) as usize];
            if !slot.is_empty() {
                self.current.clear();
                std::mem::swap(&mut self.current, slot);
                let i = (self.now % SLOTS) as usize;
                self.bits[i / 64] &= !(1 << (i % 64));
                self.in_wheel -= self.current.len();
                self.next = 0;
                continue;
            }
            if self.in_wheel == 0 {
                let Reverse((t, _, _)) = self.overflow.peek()?;
                self.now = *t;
            } else {
                self.now += self.distance_to_next().max(1);
            }
            self.migrate();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_in_time_order_then_push_order() {
        let mut w = Wheel::new();
        w.push(5, 1u32);
        w.push(3, 2);
        w.push(5, 3);
        w.push(SLOTS * 3 + 7, 4);
        w.push(SLOTS + 1, 5);
        let mut out = Vec::new();
        while let Some((t, e)) = w.pop() {
            if e == 2 {
                // pushed while handling time 3, for time 3: comes next
                w.push(3, 6);
            }
            out.push((t, e));
        }
        assert_eq!(
            out,
            vec![
                (3, 2),
                (3, 6),
                (5, 1),
                (5, 3),
                (SLOTS + 1, 5),
                (SLOTS * 3 + 7, 4)
            ]
        );
    }
}
