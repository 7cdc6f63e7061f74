//! vtop: from cache-line ping-pong results between pairs of vCPUs to
//! topology classes and groups.
//!
//! Two decisions are made, in this order:
//! 1. *Stacked* pairs (two vCPUs on one physical CPU, never running at the
//!    same time) complete almost no fast transfers: each hand-over of the
//!    line waits for the hypervisor to switch vCPUs. That test is absolute
//!    and per pair, so it can run (and drive pair skipping) while probing.
//! 2. The other pairs are grouped by their latency: sorted latencies are cut
//!    where one is much larger than the previous one (a *gap* in the
//!    distribution), and the resulting levels named from closest to farthest.
//!    Only when a level's name cannot follow from the distribution alone (a
//!    single level: SMT siblings or merely a shared cache?) is an absolute
//!    anchor used, and the report says so.

use crate::stats::upper_median;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Result of ping-ponging one cache line between two vCPUs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairProbe {
    pub a: u32,
    pub b: u32,
    /// Hand-overs of the line completed in the window.
    pub transfers: u64,
    /// Hand-overs completed within `FAST_TRANSFER_NS` of the previous one:
    /// both vCPUs were running at that moment.
    pub fast_transfers: u64,
    pub window_ns: u64,
    /// Lowest mean one-way transfer latency over a batch of transfers.
    pub latency_ns: Option<f64>,
    /// Windows used (the window is extended when few transfers are seen).
    pub attempts: u32,
}

/// Tunables of the classification (documented in docs/probers.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TopologyParams {
    /// Fewer fast transfers than this after every extension: stacked.
    pub stacked_max_fast_transfers: u64,
    /// Consecutive sorted latencies further apart than this ratio start a new level...
    pub level_gap_ratio: f64,
    /// ...if they also differ by at least this much (noise floor).
    pub level_gap_min_ns: f64,
    /// Below this one-way latency the closest level is taken as SMT siblings
    /// when the distribution alone cannot tell.
    pub smt_anchor_ns: f64,
}

impl Default for TopologyParams {
    fn default() -> Self {
        TopologyParams {
            stacked_max_fast_transfers: 50,
            level_gap_ratio: 1.5,
            level_gap_min_ns: 15.0,
            smt_anchor_ns: 15.0,
        }
    }
}

/// A hand-over this soon after the previous one means both vCPUs ran.
pub const FAST_TRANSFER_NS: u64 = 20_000;

/// How two vCPUs relate, closest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// Share one physical CPU and never run at the same time.
    Stacked,
    /// Hardware threads of one core.
    Smt,
    /// Different cores sharing a last-level cache.
    Llc,
    /// Different last-level caches within what looks like one socket.
    CrossLlc,
    /// The farthest level when at least three non-SMT levels exist.
    CrossSocket,
}

impl PairProbe {
    pub fn is_stacked(&self, p: &TopologyParams) -> bool {
        self.fast_transfers < p.stacked_max_fast_transfers
    }
}

fn key(a: u32, b: u32) -> (u32, u32) {
    (a.min(b), a.max(b))
}

/// One level of the latency distribution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Level {
    pub relation: Relation,
    pub min_ns: f64,
    pub median_ns: f64,
    pub max_ns: f64,
    pub pairs: usize,
}

/// The classified topology.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    pub cpus: Vec<u32>,
    /// Relation of every pair (measured or inferred), keyed (low, high).
    pub relations: BTreeMap<(u32, u32), Relation>,
    /// One-way latency per pair; `None` for stacked pairs (no transfers to time).
    pub latency_ns: BTreeMap<(u32, u32), Option<f64>>,
    pub levels: Vec<Level>,
}

impl Topology {
    pub fn relation(&self, a: u32, b: u32) -> Option<Relation> {
        self.relations.get(&key(a, b)).copied()
    }

    /// Connected groups of CPUs linked by relations at most as far as `within`.
    pub fn groups(&self, within: Relation) -> Vec<Vec<u32>> {
        let mut parent: BTreeMap<u32, u32> = self.cpus.iter().map(|&c| (c, c)).collect();
        fn find(parent: &mut BTreeMap<u32, u32>, x: u32) -> u32 {
            let p = parent[&x];
            if p == x {
                return x;
            }
            let root = find(parent, p);
            parent.insert(x, root);
            root
        }
        for (&(a, b), &rel) in &self.relations {
            if rel <= within {
                let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
                if ra != rb {
                    parent.insert(ra.max(rb), ra.min(rb));
                }
            }
        }
        let mut groups: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for &c in &self.cpus {
            let r = find(&mut parent, c);
            groups.entry(r).or_default().push(c);
        }
        groups.into_values().collect()
    }

    /// Whether any two vCPUs are stacked.
    pub fn has_stacked(&self) -> bool {
        self.relations.values().any(|&r| r == Relation::Stacked)
    }

    /// The other members of `cpu`'s group at `within`.
    pub fn peers(&self, cpu: u32, within: Relation) -> Vec<u32> {
        self.groups(within)
            .into_iter()
            .find(|g| g.contains(&cpu))
            .map(|g| g.into_iter().filter(|&c| c != cpu).collect())
            .unwrap_or_default()
    }

    /// Index of `cpu`'s group at `within`, groups numbered by lowest member.
    pub fn group_index(&self, cpu: u32, within: Relation) -> Option<u32> {
        self.groups(within)
            .iter()
            .position(|g| g.contains(&cpu))
            .map(|i| i as u32)
    }

    /// Pairs that re-check this topology cheaply: each stacked group's
    /// first vCPU with every other member (one pair per group would miss
    /// the host moving any other member apart, and nothing else signals
    /// that: RWC keeps those members idle), and a chain through one
    /// representative per core group.
    pub fn validation_pairs(&self) -> Vec<(u32, u32)> {
        let mut pairs = Vec::new();
        for g in self.groups(Relation::Stacked) {
            for &other in g.iter().skip(1) {
                pairs.push((g[0], other));
            }
        }
        let reps: Vec<u32> = self.groups(Relation::Smt).iter().map(|g| g[0]).collect();
        for w in reps.windows(2) {
            pairs.push((w[0], w[1]));
        }
        pairs
    }
}

/// Which earlier result makes probing (a, b) unnecessary: if a is stacked
/// with c, then (a, b) relates exactly as (c, b) does.
pub fn implied_by(
    a: u32,
    b: u32,
    known: &BTreeMap<(u32, u32), PairProbe>,
    p: &TopologyParams,
) -> Option<PairProbe> {
    for (&(x, y), probe) in known {
        if !probe.is_stacked(p) {
            continue;
        }
        // (x, y) stacked: substitute one for the other in (a, b).
        for (from, to) in [(x, y), (y, x)] {
            let other = if a == from {
                Some(b)
            } else if b == from {
                Some(a)
            } else {
                None
            };
            if let Some(o) = other {
                if o == to {
                    continue;
                }
                if let Some(src) = known.get(&key(to, o)) {
                    return Some(PairProbe {
                        a: key(a, b).0,
                        b: key(a, b).1,
                        ..*src
                    });
                }
            }
        }
    }
    None
}

/// Rounds of disjoint pairs covering every pair once (circle method), so a
/// round's pairs can be probed in parallel without sharing a vCPU.
pub fn round_robin(cpus: &[u32]) -> Vec<Vec<(u32, u32)>> {
    let mut ring: Vec<Option<u32>> = cpus.iter().map(|&c| Some(c)).collect();
    if ring.len() % 2 == 1 {
        ring.push(None);
    }
    let n = ring.len();
    let mut rounds = Vec::new();
    for _ in 0..n.saturating_sub(1) {
        let mut round = Vec::new();
        for i in 0..n / 2 {
            if let (Some(a), Some(b)) = (ring[i], ring[n - 1 - i]) {
                round.push(key(a, b));
            }
        }
        rounds.push(round);
        // Keep ring[0] fixed, rotate the rest by one.
        let last = ring.pop().unwrap();
        ring.insert(1, last);
    }
    rounds
}

/// Classifies measured pairs. `probes` must cover every pair of `cpus`
/// (measured or implied); missing pairs are left out of the relations.
pub fn classify(cpus: &[u32], probes: &[PairProbe], p: &TopologyParams) -> Topology {
    let mut relations = BTreeMap::new();
    let mut latency_ns = BTreeMap::new();
    let mut spread: Vec<((u32, u32), f64)> = Vec::new();
    for probe in probes {
        let k = key(probe.a, probe.b);
        if probe.is_stacked(p) {
            relations.insert(k, Relation::Stacked);
            latency_ns.insert(k, None);
        } else if let Some(lat) = probe.latency_ns {
            latency_ns.insert(k, Some(lat));
            spread.push((k, lat));
        }
    }
    spread.sort_by(|x, y| x.1.total_cmp(&y.1));

    // Cut the sorted latencies at the gaps.
    let mut clusters: Vec<Vec<((u32, u32), f64)>> = Vec::new();
    for &(k, lat) in &spread {
        match clusters.last_mut() {
            Some(c)
                if {
                    let prev = c.last().unwrap().1;
                    !(lat > prev * p.level_gap_ratio && lat - prev >= p.level_gap_min_ns)
                } =>
            {
                c.push((k, lat))
            }
            _ => clusters.push(vec![(k, lat)]),
        }
    }

    let names = name_levels(&clusters, p);
    let mut levels = Vec::new();
    for (cluster, &relation) in clusters.iter().zip(&names) {
        for &(k, _) in cluster {
            relations.insert(k, relation);
        }
        // Clusters are cut from latencies sorted ascending, so each is sorted.
        let lats: Vec<f64> = cluster.iter().map(|&(_, l)| l).collect();
        levels.push(Level {
            relation,
            min_ns: lats[0],
            median_ns: upper_median(&lats).expect("a cluster is never empty"),
            max_ns: *lats.last().unwrap(),
            pairs: lats.len(),
        });
    }
    Topology {
        cpus: cpus.to_vec(),
        relations,
        latency_ns,
        levels,
    }
}

/// Names latency levels closest first. SMT is the closest level only when
/// its latency is below the anchor; the remaining levels are, in order,
/// shared LLC, cross-LLC, cross-socket (with two remaining: LLC and
/// cross-socket; extra middle levels are cross-LLC).
fn name_levels(clusters: &[Vec<((u32, u32), f64)>], p: &TopologyParams) -> Vec<Relation> {
    if clusters.is_empty() {
        return Vec::new();
    }
    let first_median = upper_median(&clusters[0])
        .expect("a cluster is never empty")
        .1;
    let smt_first = first_median < p.smt_anchor_ns;
    let mut names = Vec::with_capacity(clusters.len());
    if smt_first {
        names.push(Relation::Smt);
    }
    let rest = clusters.len() - names.len();
    for i in 0..rest {
        names.push(match (i, rest) {
            (0, _) => Relation::Llc,
            (i, r) if i == r - 1 && r >= 2 => Relation::CrossSocket,
            _ => Relation::CrossLlc,
        });
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(a: u32, b: u32, lat: f64) -> PairProbe {
        PairProbe {
            a,
            b,
            transfers: 100_000,
            fast_transfers: 100_000,
            window_ns: 10_000_000,
            latency_ns: Some(lat),
            attempts: 1,
        }
    }

    fn stacked(a: u32, b: u32) -> PairProbe {
        PairProbe {
            transfers: 4,
            fast_transfers: 0,
            latency_ns: None,
            attempts: 3,
            ..probe(a, b, 0.0)
        }
    }

    fn all_pairs(cpus: &[u32], f: impl Fn(u32, u32) -> PairProbe) -> Vec<PairProbe> {
        let mut v = Vec::new();
        for (i, &a) in cpus.iter().enumerate() {
            for &b in &cpus[i + 1..] {
                v.push(f(a, b));
            }
        }
        v
    }

    /// The paper's 8-vCPU layout: 0-3 two SMT pairs in socket A, 4-5 SMT in
    /// socket B, 6-7 stacked in socket B.
    fn paper_layout(a: u32, b: u32) -> PairProbe {
        let socket = |c: u32| c / 4;
        let core = |c: u32| c / 2;
        if (a, b) == (6, 7) {
            stacked(a, b)
        } else if core(a) == core(b) {
            probe(a, b, 12.0 + (a as f64) * 0.3)
        } else if socket(a) == socket(b) {
            probe(a, b, 45.0 + (b as f64) * 0.5)
        } else {
            probe(a, b, 140.0 + (a + b) as f64)
        }
    }

    #[test]
    fn classifies_the_papers_eight_vcpu_layout() {
        let cpus: Vec<u32> = (0..8).collect();
        let t = classify(
            &cpus,
            &all_pairs(&cpus, paper_layout),
            &TopologyParams::default(),
        );
        assert_eq!(t.relation(6, 7), Some(Relation::Stacked));
        assert_eq!(t.relation(0, 1), Some(Relation::Smt));
        assert_eq!(t.relation(4, 5), Some(Relation::Smt));
        assert_eq!(t.relation(1, 2), Some(Relation::Llc));
        assert_eq!(t.relation(0, 7), Some(Relation::CrossSocket));
        assert_eq!(t.groups(Relation::Stacked).len(), 7);
        assert_eq!(t.peers(6, Relation::Stacked), vec![7]);
        assert_eq!(
            t.groups(Relation::Llc),
            vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
        );
        assert_eq!(t.levels.len(), 3);
    }

    #[test]
    fn levels_come_from_gaps_not_fixed_thresholds() {
        // Everything ten times slower (as under emulation): same classes,
        // except the closest level, which now cannot be SMT by the anchor.
        let cpus: Vec<u32> = (0..8).collect();
        let slow = |a, b| {
            let mut p = paper_layout(a, b);
            p.latency_ns = p.latency_ns.map(|l| l * 10.0);
            p
        };
        let t = classify(&cpus, &all_pairs(&cpus, slow), &TopologyParams::default());
        assert_eq!(t.relation(0, 1), Some(Relation::Llc));
        assert_eq!(t.relation(1, 2), Some(Relation::CrossLlc));
        assert_eq!(t.relation(0, 7), Some(Relation::CrossSocket));
        assert_eq!(t.relation(6, 7), Some(Relation::Stacked));
    }

    #[test]
    fn single_level_is_named_by_anchor() {
        let t = classify(&[0, 1], &[probe(0, 1, 60.0)], &TopologyParams::default());
        assert_eq!(t.relation(0, 1), Some(Relation::Llc));
        let t = classify(&[0, 1], &[probe(0, 1, 8.0)], &TopologyParams::default());
        assert_eq!(t.relation(0, 1), Some(Relation::Smt));
        let t = classify(&[0, 1], &[stacked(0, 1)], &TopologyParams::default());
        assert_eq!(t.relation(0, 1), Some(Relation::Stacked));
        assert_eq!(t.latency_ns[&(0, 1)], None);
        assert!(t.levels.is_empty());
    }

    #[test]
    fn round_robin_covers_each_pair_once_in_disjoint_rounds() {
        for n in 1..=17u32 {
            let cpus: Vec<u32> = (0..n).collect();
            let rounds = round_robin(&cpus);
            let mut seen = std::collections::BTreeSet::new();
            for r in &rounds {
                let mut used = std::collections::BTreeSet::new();
                for &(a, b) in r {
                    assert!(a < b);
                    assert!(used.insert(a) && used.insert(b), "round not disjoint");
                    assert!(seen.insert((a, b)), "pair twice");
                }
            }
            assert_eq!(seen.len() as u32, n * n.saturating_sub(1) / 2);
            assert!(rounds.len() as u32 <= n.max(1));
        }
    }

    #[test]
    fn stacking_implies_the_partners_relations() {
        let p = TopologyParams::default();
        let mut known = BTreeMap::new();
        known.insert((0, 1), stacked(0, 1));
        known.insert((0, 2), probe(0, 2, 40.0));
        let inferred = implied_by(1, 2, &known, &p).unwrap();
        assert_eq!((inferred.a, inferred.b), (1, 2));
        assert_eq!(inferred.latency_ns, Some(40.0));
        assert!(implied_by(2, 3, &known, &p).is_none());
        // The stacked pair itself is never "implied" by itself.
        assert!(implied_by(0, 1, &BTreeMap::from([((0, 1), stacked(0, 1))]), &p).is_none());
    }

    #[test]
    fn validation_pairs_cover_stacks_and_cores() {
        let cpus: Vec<u32> = (0..8).collect();
        let t = classify(
            &cpus,
            &all_pairs(&cpus, paper_layout),
            &TopologyParams::default(),
        );
        let v = t.validation_pairs();
        assert!(v.contains(&(6, 7)));
        // Core groups {0,1} {2,3} {4,5} {6,7}: chain of three.
        assert_eq!(v.len(), 1 + 3);
    }

    /// Regression (found in review): with one pair per stacked group, the
    /// host moving vCPU 2 of a group {0, 1, 2} apart passed every check.
    #[test]
    fn validation_pairs_reach_every_member_of_a_stacked_group() {
        let cpus = [0, 1, 2, 3];
        let probes: Vec<PairProbe> = all_pairs(&cpus, |a, b| {
            if b <= 2 {
                stacked(a, b)
            } else {
                probe(a, b, 80.0)
            }
        });
        let t = classify(&cpus, &probes, &TopologyParams::default());
        assert_eq!(t.groups(Relation::Stacked), [vec![0, 1, 2], vec![3]]);
        assert!(t.has_stacked());
        let apart = classify(
            &cpus,
            &all_pairs(&cpus, |a, b| probe(a, b, 80.0)),
            &TopologyParams::default(),
        );
        assert!(!apart.has_stacked());
        let v = t.validation_pairs();
        assert!(v.contains(&(0, 1)) && v.contains(&(0, 2)), "{v:?}");
    }
}
