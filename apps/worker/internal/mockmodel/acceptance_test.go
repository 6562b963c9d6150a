package mockmodel

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"testing"

	"github.com/stretchr/testify/require"
)

// screenshot is a 1280x800 JPEG (quality 72, as botd's) of a grey screen
// with the decoy and, when btn is not empty, the button at btn.
func screenshot(t *testing.T, btn image.Rectangle) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, screenW, screenH))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.RGBA{0xf4, 0xf4, 0xf4, 0xff}), image.Point{}, draw.Src)
	draw.Draw(img, decoyRect.Add(image.Pt(0, 90)), image.NewUniform(color.RGBA{0x22, 0xaa, 0x77, 0xff}), image.Point{}, draw.Src)
	if !btn.Empty() {
		draw.Draw(img, btn, image.NewUniform(ButtonColor), image.Point{}, draw.Src)
	}
	var b bytes.Buffer
	require.NoError(t, jpeg.Encode(&b, img, &jpeg.Options{Quality: 72}))
	return "data:image/jpeg;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

// result is a function_call_output's output as Codex sends it.
func result(t *testing.T, callID string, images ...string) Output {
	t.Helper()
	items := []map[string]string{{"type": "input_text", "text": `{"width":1280,"height":800}`}}
	for _, u := range images {
		items = append(items, map[string]string{"type": "input_image", "image_url": u})
	}
	raw, err := json.Marshal(items)
	require.NoError(t, err)
	return parseOutput(callID, raw)
}

func TestParseOutput(t *testing.T) {
	o := parseOutput("c", json.RawMessage(`"plain text"`))
	require.Equal(t, "plain text", o.Text)
	require.Empty(t, o.Images)
	o = parseOutput("c", json.RawMessage(`[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"data:x"},{"type":"input_text","text":"b"}]`))
	require.Equal(t, "ab", o.Text)
	require.Equal(t, []string{"data:x"}, o.Images)
}

func TestFindButton(t *testing.T) {
	for _, at := range []image.Point{{20, 100}, {1100, 700}, {300, 420}} {
		btn := image.Rect(at.X, at.Y, at.X+ButtonW, at.Y+ButtonH)
		l := decodeAndFind(result(t, "c", screenshot(t, btn)))
		require.True(t, l.ok, l.why)
		require.True(t, l.found, l.why)
		require.InDelta(t, at.X+ButtonW/2, l.button.X, 2)
		require.InDelta(t, at.Y+ButtonH/2, l.button.Y, 2)
	}
	l := decodeAndFind(result(t, "c", screenshot(t, image.Rectangle{})))
	require.True(t, l.ok)
	require.False(t, l.found, "no button on the page")
	require.Contains(t, l.why, "no pixel")
	// Twice the size is not the button.
	l = decodeAndFind(result(t, "c", screenshot(t, image.Rect(10, 100, 10+2*ButtonW, 100+2*ButtonH))))
	require.False(t, l.found)
}

// TestAcceptanceLooksBeforeClicking: the model clicks only where it saw the
// button, looks again (bounded) while the page shows none, and records a
// result without a screenshot as a problem.
func TestAcceptanceLooksBeforeClicking(t *testing.T) {
	btn := image.Rect(700, 600, 700+ButtonW, 600+ButtonH)
	empty, withButton := screenshot(t, image.Rectangle{}), screenshot(t, btn)
	text := func(id string) Output { return parseOutput(id, json.RawMessage(`"ok"`)) }

	a := NewAcceptance("http://127.0.0.1:1/", "alice")
	outs := []Output{result(t, "1", empty), text("2"), result(t, "3", empty)}
	step := a.Script(outs)
	require.Equal(t, "computer_act", step.Tool)
	require.NotContains(t, jsonOf(t, step.Args), "click", "no blind click: %s", jsonOf(t, step.Args))

	outs = append(outs, result(t, "4", withButton))
	step = a.Script(outs)
	require.Equal(t, "computer_act", step.Tool)
	require.Contains(t, jsonOf(t, step.Args), `"type":"click","x":748,"y":620`)
	rep := a.Report()
	require.Empty(t, rep.Problems)
	require.Equal(t, 2, rep.Looks)
	require.Equal(t, image.Pt(748, 620), *rep.Click)

	// The click's screenshot still shows the button: the model looks
	// again (the page may paint late), and the button gone on a later
	// look is no problem.
	a.MaxAfterClick = 2
	step = a.Script(append(outs, result(t, "5", withButton)))
	require.Equal(t, "computer_act", step.Tool)
	require.NotContains(t, jsonOf(t, step.Args), "click", "no second click: %s", jsonOf(t, step.Args))
	require.Empty(t, a.Report().Problems)
	step = a.Script(append(outs, result(t, "5", withButton), result(t, "6", empty)))
	require.Equal(t, "shell", step.Tool)
	require.Empty(t, a.Report().Problems)
	require.Equal(t, 1, a.Report().AfterClick)
	step = a.Script(append(outs, result(t, "5", withButton), result(t, "6", empty), text("7")))
	require.Equal(t, "file_write", step.Tool)

	// Still there after MaxAfterClick more looks: a problem, and the flow
	// goes on.
	step = a.Script(append(outs, result(t, "5", withButton), result(t, "6b", withButton)))
	require.Equal(t, "computer_act", step.Tool)
	require.Empty(t, a.Report().Problems)
	step = a.Script(append(outs, result(t, "5", withButton), result(t, "6b", withButton), result(t, "7b", withButton)))
	require.Equal(t, "shell", step.Tool)
	require.Len(t, a.Report().Problems, 1)
	require.Contains(t, a.Report().Problems[0], "did not press the button")
	require.Contains(t, a.Report().Problems[0], "after 2 more looks")

	// Never found: it gives up after MaxLooks, saying why, without a click.
	a = NewAcceptance("http://127.0.0.1:1/", "alice")
	a.MaxLooks = 3
	outs = []Output{result(t, "1", empty), text("2")}
	for i := range 3 {
		outs = append(outs, result(t, string(rune('3'+i)), empty))
	}
	step = a.Script(outs)
	require.Empty(t, step.Tool)
	require.Contains(t, step.Message, "FAILED: the button")
	require.Nil(t, a.Report().Click)
	require.Contains(t, a.Report().Problems[0], "in none of 3 screenshots")

	// A result without an image, or with a broken one.
	a = NewAcceptance("http://127.0.0.1:1/", "alice")
	broken := withButton[:len(withButton)/2]
	a.Script([]Output{result(t, "1"), text("2"), result(t, "3", broken)})
	rep = a.Report()
	require.Len(t, rep.Problems, 2, "%v", rep.Problems)
	require.Contains(t, rep.Problems[0], "0 images in the result")
	require.Contains(t, rep.Problems[1], "look 1")
	require.Equal(t, 2, rep.Screenshots)
	require.Zero(t, rep.Images)
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
