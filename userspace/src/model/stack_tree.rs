//! Stacks interned as a prefix tree of `u32` node indices.
//!
//! In: stacks as sequences of `u64` keys, root first. Out: one `u32` per
//! distinct stack; the tree is stored as two columns (`parent`, `key`) plus
//! a hash index. Interning a stack that was seen before allocates nothing,
//! so the per-sample hot path stays allocation-free once the tree is warm.

use rustc_hash::FxHashMap;

/// Index of a node in a [`StackTree`].
pub type NodeIndex = u32;

/// The parent of a root node.
pub const NO_PARENT: NodeIndex = u32::MAX;

/// A prefix tree: each node is (parent, key).
#[derive(Debug, Default, Clone)]
pub struct StackTree {
    parent: Vec<NodeIndex>,
    key: Vec<u64>,
    index: FxHashMap<(NodeIndex, u64), NodeIndex>,
}

impl StackTree {
    /// An empty tree.
    pub fn new() -> StackTree {
        StackTree::default()
    }

    /// The node for `key` under `parent` (use [`NO_PARENT`] for a root),
    /// created if it does not exist yet.
    #[inline]
    pub fn child(&mut self, parent: NodeIndex, key: u64) -> NodeIndex {
        let next = self.parent.len() as NodeIndex;
        *self.index.entry((parent, key)).or_insert_with(|| {
            self.parent.push(parent);
            self.key.push(key);
            next
        })
    }

    /// The parent of `node`, or [`NO_PARENT`].
    #[inline]
    pub fn parent(&self, node: NodeIndex) -> NodeIndex {
        self.parent[node as usize]
    }

    /// The key of `node`.
    #[inline]
    pub fn key(&self, node: NodeIndex) -> u64 {
        self.key[node as usize]
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.parent.len()
    }

    /// True when no stack was interned.
    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    /// Rebuild a tree from its columns (as [`StackTree::columns`] gives
    /// them); None if a parent does not point backwards.
    pub fn from_columns(parent: Vec<NodeIndex>, key: Vec<u64>) -> Option<StackTree> {
        if parent.len() != key.len() {
            return None;
        }
        let mut index = FxHashMap::default();
        index.reserve(parent.len());
        for (n, (&p, &k)) in parent.iter().zip(&key).enumerate() {
            if p != NO_PARENT && p as usize >= n {
                return None;
            }
            index.insert((p, k), n as NodeIndex);
        }
        Some(StackTree { parent, key, index })
    }

    /// The tree's columns: parent and key of each node.
    pub fn columns(&self) -> (&[NodeIndex], &[u64]) {
        (&self.parent, &self.key)
    }

    /// Keys of the stack ending at `node`, root first, into `out` (cleared first).
    pub fn path(&self, mut node: NodeIndex, out: &mut Vec<u64>) {
        out.clear();
        while node != NO_PARENT {
            out.push(self.key(node));
            node = self.parent(node);
        }
        out.reverse();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that equal stacks intern to the same node, shared prefixes are
    /// stored once, and paths come back root first.
    #[test]
    fn shares_prefixes_and_round_trips() {
        let mut t = StackTree::new();
        let intern = |t: &mut StackTree, s: &[u64]| s.iter().fold(NO_PARENT, |p, &k| t.child(p, k));
        let abc = intern(&mut t, &[1, 2, 3]);
        let abd = intern(&mut t, &[1, 2, 4]);
        let abc2 = intern(&mut t, &[1, 2, 3]);
        let ae = intern(&mut t, &[1, 5]);
        assert_eq!(abc, abc2);
        assert_ne!(abc, abd);
        assert_eq!(t.len(), 5, "1, 2, 3, 4, 5 each stored once");
        assert_eq!(t.parent(abc), t.parent(abd));
        let mut out = Vec::new();
        t.path(ae, &mut out);
        assert_eq!(out, vec![1, 5]);
        t.path(abd, &mut out);
        assert_eq!(out, vec![1, 2, 4]);
        for n in 0..t.len() as u32 {
            let p = t.parent(n);
            assert!(p == NO_PARENT || p < n, "prefixes point backwards");
        }
    }
}
