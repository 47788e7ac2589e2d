//! Warnings for the client: short, one line each (clients print them as they are).

/// Warnings longer than this are cut (clients truncate long ones anyway).
pub const MAX_WARNING_LEN: usize = 120;

/// Cuts a warning to [`MAX_WARNING_LEN`] characters on a character boundary, on one line:
/// control characters (from annotation values quoted in it) become spaces.
pub fn shorten(mut msg: String) -> String {
    if msg.contains(char::is_control) {
        msg = msg.replace(char::is_control, " ");
    }
    if msg.chars().count() > MAX_WARNING_LEN {
        let cut = msg
            .char_indices()
            .nth(MAX_WARNING_LEN - 1)
            .map_or(msg.len(), |(i, _)| i);
        msg.truncate(cut);
        msg.push('…');
    }
    msg
}
