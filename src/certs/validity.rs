//! The end of a certificate's validity (X.509 `notAfter`), read from its DER encoding for
//! the `otel_injector_certificate_expiry_timestamp_seconds` gauge. A walk over the few
//! fields before `validity` with `yasna` (already in the tree through `rcgen`).

use yasna::models::{GeneralizedTime, UTCTime};
use yasna::{ASN1Error, ASN1ErrorKind, BERReader, Tag};

const UTC_TIME: Tag = Tag {
    tag_class: yasna::TagClass::Universal,
    tag_number: 23,
};
const GENERALIZED_TIME: Tag = Tag {
    tag_class: yasna::TagClass::Universal,
    tag_number: 24,
};

/// One `Time` (RFC 5280 §4.1.2.5: UTCTime or GeneralizedTime), in unix seconds.
fn time(r: BERReader<'_, '_>) -> Result<i64, ASN1Error> {
    let tag = r.lookahead_tag()?;
    if tag == UTC_TIME {
        r.read_utctime()
            .map(|t: UTCTime| t.datetime().unix_timestamp())
    } else if tag == GENERALIZED_TIME {
        r.read_generalized_time()
            .map(|t: GeneralizedTime| t.datetime().unix_timestamp())
    } else {
        Err(ASN1Error::new(ASN1ErrorKind::Invalid))
    }
}

/// The `notAfter` of a DER certificate, in unix seconds.
pub fn not_after(der: &[u8]) -> Result<i64, ASN1Error> {
    yasna::parse_der(der, |r| {
        // Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue }
        r.read_sequence(|r| {
            let not_after = r.next().read_sequence(|r| {
                // version [0] EXPLICIT (absent for v1), serialNumber, signature, issuer
                r.read_optional(|r| r.read_tagged(Tag::context(0), |r| r.read_der()))?;
                for _ in 0..3 {
                    r.next().read_der()?;
                }
                // Validity ::= SEQUENCE { notBefore Time, notAfter Time }
                let not_after = r.next().read_sequence(|r| {
                    time(r.next())?;
                    time(r.next())
                })?;
                // subject, subjectPublicKeyInfo and the optional fields after them.
                while r.read_optional(|r| r.read_der())?.is_some() {}
                Ok(not_after)
            })?;
            r.next().read_der()?;
            r.next().read_der()?;
            Ok(not_after)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::generate as certs;
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject as _;

    fn der(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    }

    #[test]
    fn reads_not_after_in_both_time_encodings() {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let hosts = ["127.0.0.1".to_owned()];
        // 2026-12-01T00:00:00Z is written as UTCTime, 2051-01-02T03:04:05Z (from 2050 on)
        // as GeneralizedTime (RFC 5280 §4.1.2.5).
        for (from, to) in [(1_764_547_200, 1_796_083_200), (0, 2_556_846_245)] {
            let params = certs::ca_params("validity test", Some((from, to))).unwrap();
            let ca = params.self_signed(&ca_key).unwrap();
            assert_eq!(not_after(ca.der()).unwrap(), i64::try_from(to).unwrap());
            let issuer = rcgen::Issuer::new(params, &ca_key);
            let (leaf, _) = certs::serving(&issuer, &hosts, Some((from, to))).unwrap();
            assert_eq!(not_after(&der(&leaf)).unwrap(), i64::try_from(to).unwrap());
        }
    }

    #[test]
    fn refuses_what_is_not_a_certificate() {
        let dev = certs::generate("validity test", &["127.0.0.1".to_owned()]).unwrap();
        let good = der(&dev.cert);
        assert!(not_after(&good).is_ok());
        assert!(not_after(&good[..good.len() - 1]).is_err(), "truncated");
        assert!(not_after(b"\x30\x00").is_err(), "empty sequence");
        assert!(not_after(b"not der").is_err());
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(not_after(&trailing).is_err(), "trailing bytes");
    }
}
