//! [`SpecHash`]: the digest of an Instrumentation's spec that the webhook records on the pods
//! it injects and the status controller, the rollout and the rollback compare.

use super::spec::InstrumentationSpec;

/// A short digest of an Instrumentation's `spec` (the first 4 bytes of SHA-256 over its JSON
/// as this crate writes it, then its v1beta1 fields' when it carries any), shown as 8 hex
/// digits. Of the engine's model, not of a version's JSON: reading an object in the other
/// version never changes it. The webhook records it on the pods it
/// injects and the status controller compares it with the current spec's, so both must read
/// the spec through these types: fields they drop do not count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpecHash(pub [u8; 4]);

impl SpecHash {
    pub fn of(spec: &InstrumentationSpec) -> SpecHash {
        // The spec's types hold only strings, numbers and ordered maps: they always serialize,
        // and in one order.
        let mut json = serde_json::to_vec(spec).unwrap_or_default();
        // The v1beta1 meaning counts too (a v1alpha1 object's digest stays what it was).
        if let Some(beta) = &spec.v1beta1 {
            json.extend(serde_json::to_vec(beta).unwrap_or_default());
        }
        let digest = ring::digest::digest(&ring::digest::SHA256, &json);
        let mut short = [0; 4];
        short.copy_from_slice(&digest.as_ref()[..4]);
        SpecHash(short)
    }
}

impl std::fmt::Display for SpecHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::str::FromStr for SpecHash {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        if s.len() != 8 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(());
        }
        let mut out = [0; 4];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| ())?;
        }
        Ok(SpecHash(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Instrumentation;

    #[test]
    fn the_spec_hash_follows_the_spec_only() {
        let mut a = Instrumentation::new("a", InstrumentationSpec::default());
        let h = SpecHash::of(&a.spec);
        assert_eq!(h.to_string().len(), 8);
        assert_eq!(h.to_string().parse::<SpecHash>(), Ok(h));
        a.metadata.namespace = Some("elsewhere".into());
        assert_eq!(SpecHash::of(&a.spec), h, "metadata does not count");
        a.spec.env.push(k8s_openapi::api::core::v1::EnvVar {
            name: "X".into(),
            value: Some("1".into()),
            ..Default::default()
        });
        assert_ne!(SpecHash::of(&a.spec), h);
        assert!("3f2a9c1".parse::<SpecHash>().is_err());
        assert!("3f2a9c1g".parse::<SpecHash>().is_err());
    }
}
