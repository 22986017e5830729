//! Why a plot was not drawn.

use std::path::PathBuf;

use plotters::prelude::{DrawingAreaErrorKind, DrawingBackend};

/// What drawing on a plotters backend gives: its errors are the backend's own, turned into a
/// [`PlotError::Draw`] with the path when the file is written.
pub(super) type DrawResult<DB> =
    Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// The environment variable naming the font file to use.
pub(super) const FONT_ENV: &str = "GPU_TRACKER_FONT";

/// Why a plot was not drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The file name ends in neither `.svg` nor `.png`.
    #[error("cannot plot to {}: the file name must end in .svg or .png", path.display())]
    UnknownFormat {
        /// The path asked for.
        path: PathBuf,
    },
    /// No TrueType font was found.
    #[error(
        "--plot needs a TrueType font: install fonts-dejavu-core (Debian) or set {FONT_ENV} to a \
         .ttf file (looked for: {})",
        list_paths(tried)
    )]
    NoFont {
        /// The files looked for.
        tried: Vec<PathBuf>,
    },
    /// The font file is not a font that can be used.
    #[error("{} is not a TrueType font the plot can use; set {FONT_ENV} to a .ttf file", path.display())]
    BadFont {
        /// The font file.
        path: PathBuf,
    },
    /// Drawing or writing the file failed.
    #[error("cannot draw or write {}: {message}", path.display())]
    Draw {
        /// The output path.
        path: PathBuf,
        /// What the drawing library said.
        message: String,
    },
}

pub(super) fn list_paths(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}
