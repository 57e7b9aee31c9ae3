"""Images as people have them (PNG, JPEG, grayscale, RGBA, palettes, phone photos on their side) become the
arrays ImageNet classifiers expect, checked against numpy computations written from the definition; class
names and top-k."""

import warnings

import numpy as np
import pytest

from kuiper.app import labels
from kuiper.core.errors import ConfigError, ImageError
from kuiper.app.images import IMAGENET_MEAN, IMAGENET_STD, Preprocess, find_images, load_image

Image = pytest.importorskip("PIL.Image")

MEAN = np.array(IMAGENET_MEAN, np.float32)
STD = np.array(IMAGENET_STD, np.float32)
RNG = np.random.default_rng(7)


def normalised(pixels: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 -> (1, 3, H, W) float32, ImageNet-normalised: the definition, in float64."""
    x = (pixels.astype(np.float64) / 255 - MEAN) / STD
    return x.transpose(2, 0, 1)[None]


def save(tmp_path, name, pixels, mode=None, **options):
    path = tmp_path / name
    Image.fromarray(pixels, mode).save(path, **options)
    return path


def test_a_256_square_is_only_cropped_and_normalised(tmp_path):
    pixels = RNG.integers(0, 256, (256, 256, 3), dtype=np.uint8)
    x = load_image(save(tmp_path, "square.png", pixels))
    assert x.shape == (1, 3, 224, 224) and x.dtype == np.float32 and x.flags.c_contiguous
    # short side already 256: no resampling; the centred 224 square starts at (256 - 224) / 2 = 16
    assert np.allclose(x, normalised(pixels[16:240, 16:240]), atol=1e-6)


def test_a_wide_image_is_cropped_in_its_centre(tmp_path):
    pixels = RNG.integers(0, 256, (256, 512, 3), dtype=np.uint8)  # short side 256: again no resampling
    x = load_image(save(tmp_path, "wide.png", pixels))
    assert np.allclose(x, normalised(pixels[16:240, 144:368]), atol=1e-6)  # (512 - 224) / 2 = 144


def test_halving_is_the_antialiased_bilinear_filter(tmp_path):
    """512 x 512 -> 256 x 256: bilinear with antialiasing widens the triangle filter to the scale, so each
    output pixel weighs four input pixels 1/8, 3/8, 3/8, 1/8 along each axis (the crop drops the borders,
    where the weights are renormalised). Pillow rounds to 8 bits in between: within 1/255."""
    pixels = RNG.integers(0, 256, (512, 512, 3), dtype=np.uint8)
    x = load_image(save(tmp_path, "big.png", pixels))
    taps = np.array([1, 3, 3, 1]) / 8
    padded = np.pad(pixels.astype(np.float64), ((1, 1), (1, 1), (0, 0)), mode="edge")
    rows = sum(t * padded[k:k + 512:2] for k, t in enumerate(taps))       # 256 x 514: every second row
    both = sum(t * rows[:, k:k + 512:2] for k, t in enumerate(taps))     # 256 x 256
    want = normalised(both[16:240, 16:240])
    assert np.abs(x - want).max() <= 1.01 / 255 / STD.min()


def test_jpeg_grayscale_rgba_and_palette_images_become_rgb(tmp_path):
    colour = np.array([200, 30, 90], np.uint8)
    flat = np.broadcast_to(colour, (256, 256, 3)).copy()
    want = normalised(np.broadcast_to(colour, (224, 224, 3)))
    assert np.abs(load_image(save(tmp_path, "flat.jpg", flat, quality=95)) - want).max() < 4 / 255 / STD.min()

    gray = RNG.integers(0, 256, (256, 256), dtype=np.uint8)
    x = load_image(save(tmp_path, "gray.png", gray, "L"))
    assert np.allclose(x, normalised(np.repeat(gray[16:240, 16:240, None], 3, axis=2)), atol=1e-6)

    rgba = np.dstack([flat, RNG.integers(0, 256, (256, 256), dtype=np.uint8)])  # the alpha is dropped
    assert np.allclose(load_image(save(tmp_path, "rgba.png", rgba, "RGBA")), want, atol=1e-6)

    palette = Image.fromarray(flat).quantize(colors=4)
    palette.save(tmp_path / "palette.png", transparency=bytes([128, 255]))  # an alpha per palette entry
    # straight to RGB, a palette with such transparency makes Pillow warn: kuiper goes through RGBA
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = load_image(tmp_path / "palette.png")
    assert np.allclose(x, want, atol=1e-6)


def test_a_photo_on_its_side_is_turned_upright(tmp_path):
    pixels = np.zeros((256, 512, 3), np.uint8)
    pixels[:, 256:] = 255  # left half black, right half white, as stored
    exif = Image.Exif()
    exif[0x0112] = 6  # EXIF orientation 6: show it turned 90 degrees clockwise
    x = load_image(save(tmp_path, "phone.png", pixels, exif=exif))
    # upright it is 256 wide and 512 tall, black on top; the crop's rows 144..367 cross the middle at 256
    upright = np.zeros((224, 224, 3), np.uint8)
    upright[112:] = 255
    assert np.allclose(x, normalised(upright), atol=1e-6)


def test_other_preparation(tmp_path):
    pixels = RNG.integers(0, 256, (100, 100, 3), dtype=np.uint8)
    x = load_image(save(tmp_path, "small.png", pixels), Preprocess(resize=100, crop=60, mean=(0, 0, 0),
                                                                    std=(1, 1, 1)))
    assert np.allclose(x, pixels[20:80, 20:80].transpose(2, 0, 1)[None] / 255, atol=1e-6)
    assert Preprocess.for_input(299) == Preprocess(resize=342, crop=299)  # inception_v3's 299 of 342
    assert Preprocess.for_shape((1, 3, 299, 299)) == Preprocess(resize=342, crop=299)
    for shape in ((1, 3, 224, 224), (2, 3, 32, 48), (1, 3, "?", "?"), None):  # the defaults
        assert Preprocess.for_shape(shape) == Preprocess()
    for bad, message in ((dict(crop=300), "crop=300 is larger than resize=256"),
                         (dict(std=(1, 0, 1)), "std=(1, 0, 1): every channel's std must be above 0"),
                         (dict(mean=(0, 0)), "mean=(0, 0): give three finite numbers"),
                         (dict(resize=0), "resize=0: give a whole number of pixels")):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            Preprocess(**bad)


def test_unreadable_images_and_folders_name_the_file(tmp_path):
    (tmp_path / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(ImageError, match=f"^{tmp_path / 'broken.png'}: cannot read it as an image"):
        load_image(tmp_path / "broken.png")
    (tmp_path / "notes.txt").write_text("no image")
    (tmp_path / "sub.jpg").mkdir()  # a folder named like an image is not one
    assert find_images(tmp_path) == [tmp_path / "broken.png"]
    for name in ("b.JPG", "a.jpeg", "c.webp", "d.tiff"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in find_images(tmp_path)] == ["a.jpeg", "b.JPG", "broken.png", "c.webp", "d.tiff"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ImageError, match="no images in this folder"):
        find_images(empty)


def test_imagenet_class_names_ship_with_kuiper():
    names = labels.imagenet_classes()
    assert len(names) == 1000 == len(set(names))
    assert names[0] == "tench" and names[999] == "toilet tissue"
    logits = np.zeros((2, 1000), np.float32)
    assert labels.names_for(logits) == list(names)
    assert labels.names_for(np.zeros((2, 10))) is None and labels.names_for(np.zeros((2, 1000, 1))) is None
    mine = [f"class {k}" for k in range(10)]
    assert labels.names_for(np.zeros((2, 10)), mine) == mine
    with pytest.raises(ConfigError, match="3 class names, but no output has 3 classes"):
        labels.check_names(["a", "b", "c"], [np.zeros((1, 10))])


def test_top_k_is_the_largest_first():
    scores = RNG.standard_normal((3, 50)).astype(np.float32)
    indices, values = labels.top_k(scores, 5)
    assert indices.tolist() == np.argsort(-scores, axis=1)[:, :5].tolist()
    assert np.array_equal(values, np.sort(scores, axis=1)[:, ::-1][:, :5])
    assert labels.top_k(scores, 80)[0].shape == (3, 50)  # k beyond the classes: all of them


def test_a_one_channel_model_gets_grayscale_with_one_mean_and_std(tmp_path):
    pixels = RNG.integers(0, 256, (28, 28, 3), dtype=np.uint8)
    pre = Preprocess.for_shape((1, 1, 28, 28))
    # ImageNet's statistics averaged over the channels, resize scaled as for any small square input
    assert pre == Preprocess(resize=32, crop=28, mean=(0.449,), std=(0.226,), channels=1)
    x = load_image(save(tmp_path, "rgb.png", pixels), Preprocess.grayscale(resize=28, crop=28, mean=(0.25,),
                                                                               std=(0.5,)))
    # Pillow's luma, ITU-R 601-2 in integers: L = (R*299 + G*587 + B*114) / 1000, rounded
    luma = (pixels.astype(np.int64) @ np.array([19595, 38470, 7471]) + 0x8000) >> 16
    assert x.shape == (1, 1, 28, 28) and x.dtype == np.float32
    assert np.allclose(x[0, 0], (luma / 255 - 0.25) / 0.5, atol=1e-6)
    gray = RNG.integers(0, 256, (28, 28), dtype=np.uint8)  # a grayscale file is read as it is
    x = load_image(save(tmp_path, "gray.png", gray), Preprocess.grayscale(resize=28, crop=28))
    assert np.allclose(x[0, 0], (gray / 255 - 0.449) / 0.226, atol=1e-6)
    for bad, message in ((dict(mean=(0.5, 0.5, 0.5)), "mean=(0.5, 0.5, 0.5): give one finite number"),
                         (dict(channels=2), "channels=2: images are read as grayscale (1) or RGB (3)")):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            Preprocess.grayscale(**bad)
