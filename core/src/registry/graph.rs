//! The inputs graph of derived points (sensor paradigm, "The manifest is an admission test":
//! acyclicity; "Corrections cascade, but only so far").
//!
//! Owns: finding every cycle in the graph "point → the inputs it is derived from" (a cycle is
//! an infinite recompute loop, so admission refuses it and names it, `a → b → c → a`), and
//! the dependency order of derived points (every point after all of its inputs), which
//! `sentinel registry plan` prints and a deriving core would compute in.
//!
//! Works on point ids only, iteratively (no recursion, so a deep chain cannot overflow the
//! stack), and deterministically: the same graph gives the same cycles in the same order.

use std::collections::{BTreeMap, BTreeSet};

/// Edges: a derived point's id → the ids it is derived from. Points with no entry are not
/// derived (they are leaves). Inputs naming no point at all are ignored here; admission
/// reports them separately.
pub type Edges<'a> = BTreeMap<&'a str, Vec<&'a str>>;

/// Every distinct cycle, each as the ids along it, starting at its smallest id and ending
/// with that id again (`["a", "b", "c", "a"]`). A point deriving from itself is the cycle
/// `["a", "a"]`. Sorted.
pub fn cycles(edges: &Edges<'_>) -> Vec<Vec<String>> {
    #[derive(Copy, Clone, PartialEq)]
    enum Mark {
        OnPath,
        Done,
    }
    let mut marks: BTreeMap<&str, Mark> = BTreeMap::new();
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for &root in edges.keys() {
        if marks.contains_key(root) {
            continue;
        }
        // Depth-first with an explicit stack of (node, index of the next input to visit).
        let mut path: Vec<(&str, usize)> = vec![(root, 0)];
        marks.insert(root, Mark::OnPath);
        while let Some(top) = path.last_mut() {
            let (node, next) = *top;
            top.1 += 1;
            let inputs = edges.get(node).map_or(&[][..], Vec::as_slice);
            let Some(&input) = inputs.get(next) else {
                marks.insert(node, Mark::Done);
                path.pop();
                continue;
            };
            match marks.get(input) {
                Some(Mark::OnPath) => {
                    let start = path
                        .iter()
                        .position(|(n, _)| *n == input)
                        .expect("invariant: a node marked on the path is on the path");
                    found.insert(normalise(path[start..].iter().map(|(n, _)| *n)));
                }
                Some(Mark::Done) => {}
                None => {
                    marks.insert(input, Mark::OnPath);
                    path.push((input, 0));
                }
            }
        }
    }
    found.into_iter().collect()
}

/// A cycle's nodes rotated to start at the smallest, closed by repeating it.
fn normalise<'a>(nodes: impl Iterator<Item = &'a str>) -> Vec<String> {
    let nodes: Vec<&str> = nodes.collect();
    let min = (0..nodes.len()).min_by_key(|&i| nodes[i]).unwrap_or(0);
    let mut out: Vec<String> = nodes[min..]
        .iter()
        .chain(&nodes[..min])
        .map(|n| (*n).to_owned())
        .collect();
    if let Some(first) = out.first().cloned() {
        out.push(first);
    }
    out
}

/// How a cycle is printed: `a → b → c → a`.
pub fn cycle_text(cycle: &[String]) -> String {
    cycle.join(" → ")
}

/// The derived points (the keys of `edges`) in dependency order: each after every derived
/// point it reads. Ties are broken by id. `None` if the graph has a cycle.
pub fn dependency_order<'a>(edges: &Edges<'a>) -> Option<Vec<&'a str>> {
    // Only derived inputs constrain the order; a leaf is available from the start.
    let mut waiting: BTreeMap<&str, usize> = BTreeMap::new();
    let mut readers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (&point, inputs) in edges {
        let derived_inputs: BTreeSet<&str> =
            inputs.iter().copied().filter(|i| edges.contains_key(i)).collect();
        waiting.insert(point, derived_inputs.len());
        for input in derived_inputs {
            readers.entry(input).or_default().push(point);
        }
    }
    let mut ready: BTreeSet<&str> = waiting
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(p, _)| *p)
        .collect();
    let mut order = Vec::with_capacity(edges.len());
    while let Some(point) = ready.pop_first() {
        order.push(point);
        for &reader in readers.get(point).map_or(&[][..], Vec::as_slice) {
            let n = waiting
                .get_mut(reader)
                .expect("invariant: every reader is a derived point");
            *n -= 1;
            if *n == 0 {
                ready.insert(reader);
            }
        }
    }
    (order.len() == edges.len()).then_some(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edges<'a>(list: &[(&'a str, &[&'a str])]) -> Edges<'a> {
        list.iter().map(|(p, i)| (*p, i.to_vec())).collect()
    }

    #[test]
    fn a_three_cycle_is_named_from_its_smallest_id() {
        let g = edges(&[("c", &["a"]), ("a", &["b"]), ("b", &["c"]), ("d", &["a", "x"])]);
        let found = cycles(&g);
        assert_eq!(found, vec![vec!["a", "b", "c", "a"]]);
        assert_eq!(cycle_text(&found[0]), "a → b → c → a");
        assert_eq!(dependency_order(&g), None);
    }

    #[test]
    fn a_self_loop_and_two_separate_cycles() {
        let g = edges(&[("s", &["s"]), ("p", &["q"]), ("q", &["p"])]);
        assert_eq!(cycles(&g), vec![vec!["p", "q", "p"], vec!["s", "s"]]);
    }

    #[test]
    fn a_diamond_is_not_a_cycle_and_orders_inputs_first() {
        let g = edges(&[
            ("top", &["left", "right"]),
            ("left", &["raw"]),
            ("right", &["raw", "left"]),
        ]);
        assert!(cycles(&g).is_empty());
        assert_eq!(dependency_order(&g), Some(vec!["left", "right", "top"]));
    }

    #[test]
    fn a_long_chain_needs_no_recursion() {
        let names: Vec<String> = (0..100_000).map(|i| format!("p{i:06}")).collect();
        let g: Edges<'_> = names
            .windows(2)
            .map(|w| (w[1].as_str(), vec![w[0].as_str()]))
            .collect();
        assert!(cycles(&g).is_empty());
        let order = dependency_order(&g).expect("acyclic");
        assert_eq!(order.first(), Some(&"p000001"));
        assert_eq!(order.len(), names.len() - 1);
    }
}
