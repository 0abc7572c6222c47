"""matplotlib for files only (Agg), with SVG output that is small (text as text in one named font,
coordinates to a hundredth of a point) and the same bytes on every run of one matplotlib (no
date, a fixed hash salt)."""
import os
import re

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

matplotlib.rcParams["svg.fonttype"] = "none"
matplotlib.rcParams["svg.hashsalt"] = "squeezekv"
matplotlib.rcParams["path.simplify"] = True
matplotlib.rcParams["font.family"] = "sans-serif"
matplotlib.rcParams["font.sans-serif"] = ["DejaVu Sans"]  # matplotlib's own font: one name in every text

SVG_METADATA = {"Date": None, "Creator": None}


def compact_svg(text):
    """The same drawing in fewer bytes: coordinates to 0.01 pt, no rotation by -0, no indentation."""
    text = re.sub(r"(\d\.\d\d)\d+", r"\1", text)
    text = re.sub(r' transform="rotate\(-0 [^)]*\)"', "", text)
    return re.sub(r"\n +", "\n", text)


def save(fig, out_dir, name, formats=("png", "svg"), dpi=120):
    """Writes OUT_DIR/NAME.png and .svg (or the formats given) and closes the figure."""
    for ext in formats:
        path = os.path.join(out_dir, f"{name}.{ext}")
        if ext == "svg":
            fig.savefig(path, metadata=SVG_METADATA)
            with open(path) as f:
                text = f.read()
            with open(path, "w") as f:
                f.write(compact_svg(text))
        else:
            fig.savefig(path, dpi=dpi)
    plt.close(fig)
