"""Every dialog draws centred over the screen it asks about, and `y` answers yes in each: the
bulk dialog drew at the top-left of a blank screen (its styles named only ConfirmScreen) and
confirmed with `a`."""

from __future__ import annotations

import pytest
from tui_support.pilot import NARROW, SIZE, VIEWS, WIDE, sample_app, settle

from pgq_tui.screens.confirm import BulkConfirmScreen, ConfirmScreen


@pytest.mark.parametrize("size", [NARROW, SIZE, WIDE])
@pytest.mark.parametrize(
    ("view", "kind"),
    [("confirm-bulk", BulkConfirmScreen), ("confirm-requeue-all", ConfirmScreen)],
)
async def test_a_dialog_is_centred_and_the_screen_below_shows(
    size: tuple[int, int], view: str, kind: type
) -> None:
    app = sample_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await VIEWS[view](pilot)
        await settle(pilot)
        assert isinstance(app.screen, kind)
        dialog = app.screen.query_one("#dialog").region
        width, height = size
        assert abs(dialog.x - (width - dialog.right)) <= 1, (dialog, size)
        assert abs(dialog.y - (height - dialog.bottom)) <= 1, (dialog, size)
        assert dialog.x > 0 and dialog.y > 0
        # the dashboard shows through around it (a dimmed background, not a blank screen)
        assert app.screen.styles.background.a < 1


async def test_y_confirms_the_bulk_dialog_and_o_takes_the_selected_job() -> None:
    answers: list[str] = []
    app = sample_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for key, single, expected in (("y", None, "all"), ("o", "job 7", "one"), ("n", None, "")):
            await app.push_screen(BulkConfirmScreen("Kill all 3 jobs?", "detail", single),
                                  answers.append)
            await settle(pilot)
            await pilot.press(key)
            await settle(pilot)
            assert not isinstance(app.screen, BulkConfirmScreen)
            assert answers[-1] == expected
        await app.push_screen(BulkConfirmScreen("Kill all 3 jobs?", "detail"), answers.append)
        await settle(pilot)
        await pilot.press("o")  # no single job offered: nothing happens
        await settle(pilot)
        assert isinstance(app.screen, BulkConfirmScreen)
        assert "[b]y[/b] all matching" in str(app.screen.query_one("#keys").content)
