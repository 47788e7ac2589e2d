//! What an agent image's reference says about the agent in it. The Operator publishes each
//! language's image as `autoinstrumentation-<lang>:<version>` (on ghcr.io, and mirrored on
//! Docker Hub as `otel/...`), so for those repositories the tag is the agent's version; for
//! any other repository, no tag or a tag that is no version, nothing is known.

/// Where the Operator publishes its agent images, before the image's name.
const OPERATOR_PREFIXES: [&str; 4] = [
    "ghcr.io/open-telemetry/opentelemetry-operator/",
    "otel/",
    "docker.io/otel/",
    "index.docker.io/otel/",
];

/// An Operator agent image's tag, read as a version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release<'a> {
    /// The tag as written (`1.15.0`, `1.16.0-1`, `0.4.0-beta.1`).
    pub tag: &'a str,
    /// Its `major.minor.patch`.
    pub version: (u64, u64, u64),
    /// What follows the first `-`, if anything.
    pub suffix: Option<&'a str>,
}

/// The release an Operator image of `name` (`autoinstrumentation-dotnet`) is tagged with;
/// `None` for another repository, no tag, or a tag that is not `a.b.c[-suffix]` (`latest`).
/// A digest after the tag is left aside.
pub fn operator_release<'a>(image: &'a str, name: &str) -> Option<Release<'a>> {
    let reference = image.split_once('@').map_or(image, |(n, _)| n);
    let (repository, tag) = reference.rsplit_once(':')?;
    let prefix = repository.strip_suffix(name)?;
    if !OPERATOR_PREFIXES.contains(&prefix) {
        return None;
    }
    let (core, suffix) = match tag.split_once('-') {
        Some((core, suffix)) => (core, Some(suffix)),
        None => (tag, None),
    };
    let mut numbers = core.split('.').map(|n| n.parse::<u64>().ok());
    let version = match (
        numbers.next(),
        numbers.next(),
        numbers.next(),
        numbers.next(),
    ) {
        (Some(Some(a)), Some(Some(b)), Some(Some(c)), None) => (a, b, c),
        _ => return None,
    };
    Some(Release {
        tag,
        version,
        suffix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const JAVA: &str = "autoinstrumentation-java";

    #[test]
    fn operator_images_give_their_version() {
        let ghcr = "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java";
        assert_eq!(
            operator_release(&format!("{ghcr}:2.20.1"), JAVA),
            Some(Release {
                tag: "2.20.1",
                version: (2, 20, 1),
                suffix: None
            })
        );
        assert_eq!(
            operator_release("otel/autoinstrumentation-java:2.26.0-1@sha256:00", JAVA),
            Some(Release {
                tag: "2.26.0-1",
                version: (2, 26, 0),
                suffix: Some("1")
            })
        );
    }

    #[test]
    fn other_images_and_tags_say_nothing() {
        for image in [
            "registry.example/autoinstrumentation-java:2.0.0",
            "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:latest",
            "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java",
            "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java@sha256:00",
            "otel/autoinstrumentation-java:2.1",
            "otel/autoinstrumentation-java:2.1.0.4",
            "otel/autoinstrumentation-nodejs:0.50.0",
            "my-otel/autoinstrumentation-java:1.0.0",
        ] {
            assert_eq!(operator_release(image, JAVA), None, "{image}");
        }
    }
}
