//! What every per-language section shares: the [`LanguageSpec`] accessors, the empty-template
//! rule, and `language_section!`, which writes a section's shared fields and impl once.

use k8s_openapi::api::core::v1::{
    EnvVar, PersistentVolumeClaimSpec, PersistentVolumeClaimTemplate, ResourceRequirements,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The settings every per-language section shares, so callers can treat them generically.
pub trait LanguageSpec {
    /// The instrumentation image; `None` when unset or empty (the Operator's "use the default").
    fn image(&self) -> Option<&str>;
    /// Language-specific env vars.
    fn env(&self) -> &[EnvVar];
    /// Compute resources (`resources` for Java, `resourceRequirements` for the others).
    fn resources(&self) -> Option<&ResourceRequirements>;
    /// The volume claim template, or `None` when unset or without content (see
    /// [`claim_template_is_empty`]).
    fn volume_claim_template(&self) -> Option<&PersistentVolumeClaimTemplate>;
    /// The deprecated emptyDir size limit.
    fn volume_limit_size(&self) -> Option<&Quantity>;
}

/// The section of a language that has none of its own (SDK-only): nothing set.
pub struct NoSection;

impl LanguageSpec for NoSection {
    fn image(&self) -> Option<&str> {
        None
    }
    fn env(&self) -> &[EnvVar] {
        &[]
    }
    fn resources(&self) -> Option<&ResourceRequirements> {
        None
    }
    fn volume_claim_template(&self) -> Option<&PersistentVolumeClaimTemplate> {
        None
    }
    fn volume_limit_size(&self) -> Option<&Quantity> {
        None
    }
}

/// Whether a volume claim template carries nothing: no metadata and a spec whose only content
/// is an empty `resources`. The Operator writes such templates into every language section it
/// defaults and treats them as absent; so do [`LanguageSpec::volume_claim_template`] and the
/// CEL rule [`RULE_VOLUME_EXCLUSIVE`](super::validation::RULE_VOLUME_EXCLUSIVE).
pub fn claim_template_is_empty(template: &PersistentVolumeClaimTemplate) -> bool {
    let metadata_empty = template
        .metadata
        .as_ref()
        .is_none_or(|m| *m == ObjectMeta::default());
    let resources_empty = template
        .spec
        .resources
        .as_ref()
        .is_none_or(|r| *r == VolumeResourceRequirements::default());
    let rest = PersistentVolumeClaimSpec {
        resources: None,
        ..template.spec.clone()
    };
    metadata_empty && resources_empty && rest == PersistentVolumeClaimSpec::default()
}

/// Defines a per-language section: the struct with the fields every language shares, in the
/// order the wire format has always had (`image`, `env`, the resources field,
/// `volumeClaimTemplate`, `volumeLimitSize`), then the language's own fields, plus its
/// [`LanguageSpec`] impl and the [`RULE_VOLUME_EXCLUSIVE`](super::validation::RULE_VOLUME_EXCLUSIVE) CEL rule.
///
/// Field doc comments become the CRD's descriptions, and they differ between languages, so each
/// invocation writes its own for the first four shared fields; `volumeLimitSize`'s text is the
/// same everywhere and lives here, as does that of `attrs`, the web servers' module settings,
/// which a section asks for with `pub struct Name with attrs`. The resources field is named by
/// the invocation because Java calls it `resources` and every other language
/// `resourceRequirements`, as in the Operator.
/// Paths inside are absolute so that the invoking file needs no imports for them.
macro_rules! language_section {
    (
        $(#[$meta:meta])*
        pub struct $name:ident $(with $attrs:ident)? {
            $(#[$image_doc:meta])* image,
            $(#[$env_doc:meta])* env,
            $(#[$resources_doc:meta])* $resources:ident,
            $(#[$volume_doc:meta])* volume_claim_template,
            $($extra:tt)*
        }
    ) => {
        $crate::crd::object::schema_objects! {
            $(#[$meta])*
            #[schemars(extend("x-kubernetes-validations" = [
                {
                    "rule": $crate::crd::RULE_VOLUME_EXCLUSIVE,
                    "message": $crate::crd::MSG_VOLUME_EXCLUSIVE,
                },
            ]))]
            pub struct $name {
                $(#[$image_doc])*
                pub image: Option<String>,
                $(#[$env_doc])*
                #[serde(default, skip_serializing_if = "Vec::is_empty")]
                pub env: Vec<::k8s_openapi::api::core::v1::EnvVar>,
                $(#[$resources_doc])*
                pub $resources: Option<::k8s_openapi::api::core::v1::ResourceRequirements>,
                $(#[$volume_doc])*
                pub volume_claim_template:
                    Option<Box<::k8s_openapi::api::core::v1::PersistentVolumeClaimTemplate>>,
                /// Size limit of the emptyDir (default 200Mi). Deprecated: use volumeClaimTemplate.
                pub volume_limit_size:
                    Option<::k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
                $(
                    /// Agent attributes written to the module configuration; they override the defaults.
                    #[serde(default, skip_serializing_if = "Vec::is_empty")]
                    pub $attrs: Vec<::k8s_openapi::api::core::v1::EnvVar>,
                )?
                $($extra)*
            }
        }

        impl $crate::crd::LanguageSpec for $name {
            fn image(&self) -> Option<&str> {
                self.image.as_deref().filter(|image| !image.is_empty())
            }
            fn env(&self) -> &[::k8s_openapi::api::core::v1::EnvVar] {
                &self.env
            }
            fn resources(&self) -> Option<&::k8s_openapi::api::core::v1::ResourceRequirements> {
                self.$resources.as_ref()
            }
            fn volume_claim_template(
                &self,
            ) -> Option<&::k8s_openapi::api::core::v1::PersistentVolumeClaimTemplate> {
                self.volume_claim_template
                    .as_deref()
                    .filter(|t| !$crate::crd::claim_template_is_empty(t))
            }
            fn volume_limit_size(
                &self,
            ) -> Option<&::k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
                self.volume_limit_size.as_ref()
            }
        }
    };
}
pub(super) use language_section;
