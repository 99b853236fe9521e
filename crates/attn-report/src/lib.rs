//! Markdown, HTML and SVG progression reports from evidence/.
