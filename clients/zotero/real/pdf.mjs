// A small PDF writer for the real-Zotero test: pages of plain text (Helvetica, one line each, so
// Zotero's PDF worker extracts it as written) and, optionally, page labels (the numbers a printed
// book or journal issue shows: /PageLabels in the catalog), which Zotero's reader displays.

/** @param {string} text */
function pdfString(text) {
  // Helvetica with WinAnsiEncoding: Latin-1 covers the accented names the test uses.
  let out = "(";
  for (const ch of text) {
    const code = ch.codePointAt(0) ?? 63;
    if (ch === "(" || ch === ")" || ch === "\\") out += "\\" + ch;
    else if (code >= 32 && code < 127) out += ch;
    else if (code >= 160 && code <= 255) out += "\\" + code.toString(8).padStart(3, "0");
    else out += "?";
  }
  return out + ")";
}

/**
 * The bytes of a PDF: `pages` is a list of pages, each a list of lines; `firstLabel`, when given,
 * labels the pages firstLabel, firstLabel + 1, ... (decimal), as a journal's page numbers.
 * @param {{pages: string[][], firstLabel?: number, title?: string}} options
 */
export function makePdf({ pages, firstLabel, title = "Zocrates test" }) {
  /** @type {string[]} */
  const objects = []; // objects[i] is object number i + 1
  const add = (/** @type {string} */ body) => objects.push(body);
  add("<< /Type /Catalog /Pages 2 0 R" + (firstLabel ? ` /PageLabels << /Nums [0 << /S /D /St ${firstLabel} >>] >>` : "") + " >>");
  add(""); // the page tree, once the pages' numbers are known
  add("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>");
  add(`<< /Title ${pdfString(title)} /Producer (zocrates tests) >>`);
  const kids = [];
  for (const lines of pages) {
    const ops = ["BT", "/F1 12 Tf", "14 TL", "72 760 Td"];
    for (const line of lines) ops.push(`${pdfString(line)} Tj`, "T*");
    ops.push("ET");
    const stream = ops.join("\n");
    add(`<< /Length ${Buffer.byteLength(stream, "latin1")} >>\nstream\n${stream}\nendstream`);
    const contents = objects.length;
    add(`<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents ${contents} 0 R >>`);
    kids.push(`${objects.length} 0 R`);
  }
  objects[1] = `<< /Type /Pages /Kids [${kids.join(" ")}] /Count ${kids.length} >>`;
  let body = "%PDF-1.4\n%\xe2\xe3\xcf\xd3\n";
  const offsets = [];
  objects.forEach((obj, i) => {
    offsets.push(Buffer.byteLength(body, "latin1"));
    body += `${i + 1} 0 obj\n${obj}\nendobj\n`;
  });
  const xref = Buffer.byteLength(body, "latin1");
  body += `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n`;
  for (const off of offsets) body += `${String(off).padStart(10, "0")} 00000 n \n`;
  body += `trailer\n<< /Size ${objects.length + 1} /Root 1 0 R /Info 4 0 R >>\nstartxref\n${xref}\n%%EOF\n`;
  return Buffer.from(body, "latin1");
}
