//! PNG charts: plotters' bitmap backend, with text drawn here. plotters 0.3.7 draws each
//! glyph at the pen position without its left side bearing (the offset of its ink from the
//! pen), so a glyph with a wide bearing, such as DejaVu Sans's "1", stood apart from the next
//! one ("1 024", "51 2"). This backend places every glyph where the font says; everything
//! else is the bitmap backend's.

use std::sync::OnceLock;

use ab_glyph::{point, Font, FontRef, ScaleFont};
use plotters::prelude::BitMapBackend;
use plotters::style::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
};

use super::FONT;

type BitMapError = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

/// The bundled font, parsed once (`None` if it cannot be: `register_font` reports that).
fn font() -> Option<&'static FontRef<'static>> {
    static PARSED: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    PARSED
        .get_or_init(|| FontRef::try_from_slice(FONT).ok())
        .as_ref()
}

/// Calls `put(x, y, coverage)` for every pixel of `text` set at `size` pixels: the first
/// glyph's pen at x = 0, the baseline at y = size / 2 (where plotters puts it, so that its
/// layout boxes still fit), each glyph at its pen position plus its own bearing, the pen
/// moved by the glyph's advance and the pair's kerning, as plotters measures text.
pub(crate) fn draw_glyphs(
    font: &FontRef,
    size: f32,
    text: &str,
    mut put: impl FnMut(i32, i32, f32),
) {
    let scaled = font.as_scaled(size);
    let baseline = size / 2.0;
    let mut pen = 0f32;
    let mut prev = None;
    for c in text.chars() {
        let id = font.glyph_id(c);
        if let Some(p) = prev {
            pen += scaled.kern(p, id);
        }
        let glyph = id.with_scale_and_position(size, point(pen, baseline));
        if let Some(outline) = font.outline_glyph(glyph) {
            let bounds = outline.px_bounds();
            let (left, top) = (bounds.min.x as i32, bounds.min.y as i32);
            outline.draw(|x, y, coverage| put(left + x as i32, top + y as i32, coverage));
        }
        pen += scaled.h_advance(id);
        prev = Some(id);
    }
}

/// The bitmap backend with its text drawn by [`draw_glyphs`].
pub(crate) struct Png<'a>(pub BitMapBackend<'a>);

impl DrawingBackend for Png<'_> {
    type ErrorType = BitMapError;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<BitMapError>> {
        self.0.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), DrawingErrorKind<BitMapError>> {
        self.0.present()
    }

    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<BitMapError>> {
        self.0.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<BitMapError>> {
        self.0.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<BitMapError>> {
        self.0.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<BitMapError>> {
        self.0.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<BitMapError>> {
        self.0.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<BitMapError>> {
        self.0.fill_polygon(vert, style)
    }

    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        (iw, ih): (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<BitMapError>> {
        self.0.blit_bitmap(pos, (iw, ih), src)
    }

    /// As plotters' own `draw_text` (anchor, rotation, layout box), with the glyphs placed by
    /// [`draw_glyphs`].
    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<BitMapError>> {
        let color = style.color();
        let Some(font) = font().filter(|_| color.alpha > 0.0) else {
            return Ok(());
        };
        let ((min_x, min_y), (max_x, max_y)) = style
            .layout_box(text)
            .map_err(|e| DrawingErrorKind::FontError(Box::new(e)))?;
        let (width, height) = (max_x - min_x, max_y - min_y);
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Right => -width,
            HPos::Center => -width / 2,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let trans = style.transform();
        let (w, h) = self.get_size();
        let mut result = Ok(());
        draw_glyphs(font, style.size() as f32, text, |x, y, coverage| {
            let (x, y) = trans.transform(x + dx - min_x, y + dy - min_y);
            let (x, y) = (pos.0 + x, pos.1 + y);
            if result.is_ok() && x >= 0 && x < w as i32 && y >= 0 && y < h as i32 {
                let mixed = BackendColor {
                    alpha: color.alpha * f64::from(coverage),
                    rgb: color.rgb,
                };
                result = self.0.draw_pixel((x, y), mixed);
            }
        });
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The columns a text's ink covers, left to right, at `size` pixels.
    fn ink_columns(text: &str, size: f32) -> Vec<i32> {
        let font = font().unwrap();
        let mut columns = std::collections::BTreeSet::new();
        draw_glyphs(font, size, text, |x, _, coverage| {
            if coverage > 0.0 {
                columns.insert(x);
            }
        });
        columns.into_iter().collect()
    }

    #[test]
    fn each_glyphs_ink_starts_at_its_left_side_bearing() {
        // plotters drew every glyph's ink from its pen position, so digits with different
        // bearings ("1" has the widest) sat unevenly: "1 024", "51 2".
        let font = font().unwrap();
        let scaled = font.as_scaled(40.0);
        for c in ['0', '1', '2', '5', '8', 'K'] {
            let bearing = scaled.h_side_bearing(font.glyph_id(c));
            let first = ink_columns(&c.to_string(), 40.0)[0];
            assert!(bearing > 2.0, "{c}: {bearing}");
            assert_eq!(
                first,
                bearing.floor() as i32,
                "'{c}' (bearing {bearing} px)"
            );
        }
    }

    #[test]
    fn the_pen_moves_by_the_advance() {
        let font = font().unwrap();
        let scaled = font.as_scaled(40.0);
        let (id1, id0) = (font.glyph_id('1'), font.glyph_id('0'));
        let one = scaled.h_advance(id1) + scaled.kern(id1, id0);
        let alone = ink_columns("0", 40.0)[0];
        let after_one: Vec<i32> = ink_columns("10", 40.0);
        let zero_start = after_one
            .windows(2)
            .find(|w| w[1] - w[0] > 1)
            .map(|w| w[1])
            .unwrap();
        assert!(
            (zero_start as f32 - (one + alone as f32)).abs() <= 1.0,
            "'0' after '1' starts at {zero_start}, expected {} + {alone}",
            one
        );
    }
}
