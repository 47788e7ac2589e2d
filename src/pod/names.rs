//! A set of names for the plan's collision checks: a sorted vector. A plan checks a few
//! dozen names per pod; sorting and binary search take less time for them than hashing
//! each with the standard library's SipHash.

/// Names, sorted; duplicates kept (a user's pod may already have them).
#[derive(Debug, Default)]
pub struct NameSet<'a>(Vec<&'a str>);

impl<'a> FromIterator<&'a str> for NameSet<'a> {
    fn from_iter<I: IntoIterator<Item = &'a str>>(names: I) -> Self {
        let mut v: Vec<&str> = names.into_iter().collect();
        // Room for the names a plan adds, without growing.
        v.reserve(16);
        v.sort_unstable();
        NameSet(v)
    }
}

impl<'a> NameSet<'a> {
    /// Adds `name`; `false` if it was there already.
    pub fn insert(&mut self, name: &'a str) -> bool {
        match self.0.binary_search(&name) {
            Ok(_) => false,
            Err(at) => {
                self.0.insert(at, name);
                true
            }
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.binary_search(&name).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_report_what_was_there() {
        let mut set: NameSet<'_> = ["b", "a", "b"].into_iter().collect();
        assert!(set.contains("a") && set.contains("b") && !set.contains("c"));
        assert!(!set.insert("a"));
        assert!(set.insert("c"));
        assert!(!set.insert("c"));
        assert!(set.insert(""));
        assert!(set.contains(""));
    }
}
