// Render the formulas that pymdownx.arithmatex marks (generic mode: <span class="arithmatex">\( \)</span>
// inline, \[ \] in a display block) with the KaTeX this site serves (docs/assets/katex), on every page
// load, instant navigation included.
document$.subscribe(() => {
  document.querySelectorAll(".arithmatex").forEach((element) => {
    renderMathInElement(element, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: false,
    });
  });
});
