//! [`label_enum!`]: the bounded values of a metric's label as an enum with its `ALL` and
//! `as_str`. Each part of the product declares its own.

/// An enum of label values: `ALL` in declaration order, `as_str` the value as written.
macro_rules! label_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vm])* $variant),+
        }

        impl $name {
            pub const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl $crate::metrics::LabelValue for $name {
            const ALL: &'static [Self] = &$name::ALL;
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
            fn index(self) -> usize {
                self as usize
            }
        }
    };
}
pub(crate) use label_enum;
