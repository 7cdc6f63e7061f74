//! The pipeline's queue: its ends wait in plain loops without a spin hint,
//! as programs write them.
#![allow(clippy::missing_spin_loop)]

use std::sync::atomic::{AtomicU64, Ordering::*};

/// A bounded single-producer single-consumer queue whose ends spin.
pub(crate) struct SpinQueue {
    slots: Vec<AtomicU64>,
    head: AtomicU64,
    tail: AtomicU64,
}

impl SpinQueue {
    pub(crate) fn new(cap: usize) -> Self {
        SpinQueue {
            slots: (0..cap).map(|_| AtomicU64::new(0)).collect(),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
        }
    }
    /// Waits (spinning) for a free slot, then adds `v`.
    pub(crate) fn push(&self, v: u64) {
        let t = self.tail.load(Relaxed);
        while t - self.head.load(Acquire) == self.slots.len() as u64 {}
        self.slots[(t % self.slots.len() as u64) as usize].store(v, Relaxed);
        self.tail.store(t + 1, Release);
    }
    /// Waits (spinning) for an item, then takes it.
    pub(crate) fn pop(&self) -> u64 {
        let h = self.head.load(Relaxed);
        while self.tail.load(Acquire) == h {}
        let v = self.slots[(h % self.slots.len() as u64) as usize].load(Relaxed);
        self.head.store(h + 1, Release);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::SpinQueue;
    use std::sync::Arc;

    #[test]
    fn items_arrive_in_order_across_threads() {
        let q = Arc::new(SpinQueue::new(2));
        let producer = {
            let q = q.clone();
            std::thread::spawn(move || (1..=100).for_each(|v| q.push(v)))
        };
        let got: Vec<u64> = (0..100).map(|_| q.pop()).collect();
        producer.join().unwrap();
        assert_eq!(got, (1..=100).collect::<Vec<_>>());
    }
}
