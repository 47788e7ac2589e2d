//! How every object type of the CRD's schema is declared: `schema_objects!` gives each struct
//! the derives and the serialization every such type needs (unset fields left out, not written
//! as `null`, so a spec's digest and its conversion see only what the user wrote), and makes
//! an `open` one keep the properties the schema does not type, as written.

/// Properties a schema object does not type, kept as written.
pub type Preserved = std::collections::BTreeMap<String, serde_json::Value>;

/// `schema_objects! { <struct>... }`: each struct with `skip_serializing_none`, the
/// derives (`Serialize`, `Deserialize`, `Clone`, `Debug`, `Default`, `PartialEq`,
/// `JsonSchema`) and camelCase field names, as the Kubernetes API conventions want;
/// `schema_objects! { file: <struct>... }` keeps the Rust (snake_case) names, for the
/// declarative configuration file's keys. `pub open struct` also marks the object
/// `x-kubernetes-preserve-unknown-fields` and ends it with `other`: the properties it does not
/// type, flattened into it and left out of the schema. Paths inside are absolute so that the
/// invoking file needs no imports for them.
macro_rules! schema_objects {
    (@objects $case:literal;) => {};
    (
        @objects $case:literal;
        $(#[$meta:meta])*
        pub open struct $name:ident { $($field:tt)* }
        $($rest:tt)*
    ) => {
        $crate::crd::object::schema_objects! {
            @objects $case;
            $(#[$meta])*
            #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
            pub struct $name {
                $($field)*
                /// Properties this schema does not type, kept as written.
                #[serde(flatten)]
                #[schemars(skip)]
                pub other: $crate::crd::object::Preserved,
            }
            $($rest)*
        }
    };
    (
        @objects $case:literal;
        $(#[$meta:meta])*
        pub struct $name:ident { $($field:tt)* }
        $($rest:tt)*
    ) => {
        #[::serde_with::skip_serializing_none]
        #[derive(
            ::serde::Serialize,
            ::serde::Deserialize,
            Clone,
            Debug,
            Default,
            PartialEq,
            ::schemars::JsonSchema,
        )]
        #[serde(rename_all = $case)]
        $(#[$meta])*
        pub struct $name { $($field)* }
        $crate::crd::object::schema_objects! { @objects $case; $($rest)* }
    };
    (file: $($rest:tt)*) => {
        $crate::crd::object::schema_objects! { @objects "snake_case"; $($rest)* }
    };
    ($($rest:tt)*) => {
        $crate::crd::object::schema_objects! { @objects "camelCase"; $($rest)* }
    };
}
pub(crate) use schema_objects;
