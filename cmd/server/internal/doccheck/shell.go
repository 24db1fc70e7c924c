package doccheck

import (
	"regexp"
	"slices"
	"strings"
)

// Command is one simple command in a doc's shell code: its words with the shell's quoting
// removed, leading NAME=value assignments and redirections left out.
type Command struct {
	Line int // where it starts
	// Inline says it is in a code span in prose: a mention, which may leave out values and
	// arguments, rather than a whole command.
	Inline bool
	Text   string // the line as written, a continued line joined to the next
	Args   []string
	// Output is what the doc shows it print, "" if nothing: for a command in a block, the
	// comment lines right under it, each less its "# "; after a "$ " prompt, the lines up to
	// the next prompt; for the block's last command when it shows neither, the fenced block
	// right after the block.
	Output string
}

// shells are the languages of the fenced blocks read for commands. A block that names none
// is read only for the lines after a "$ " prompt: without one it is text, output or a
// diagram.
var shells = []string{"sh", "bash", "shell", "console", "zsh"}

// Commands are the commands of d's shell blocks and code spans, in that order.
func (d *Doc) Commands() []Command {
	var out []Command
	for i, b := range d.Blocks {
		if !slices.Contains(shells, b.Lang) && (b.Lang != "" || !prompted(b)) {
			continue
		}
		var next *Block
		if i+1 < len(d.Blocks) && d.Blocks[i+1].AfterBlock {
			next = &d.Blocks[i+1]
		}
		out = append(out, blockCommands(b, next)...)
	}
	for _, s := range d.Spans {
		for _, args := range split(s.Text) {
			out = append(out, Command{Line: s.Line, Inline: true, Text: s.Text, Args: args})
		}
	}
	return out
}

// blockCommands reads b's lines: where any starts with a "$ " prompt, only those are
// commands, and the lines after each its output.
func blockCommands(b Block, next *Block) []Command {
	prompted := prompted(b)
	var out []Command
	for i := 0; i < len(b.Lines); {
		line, start := b.Lines[i], i
		i++
		if prompted {
			var ok bool
			if line, ok = strings.CutPrefix(line, "$ "); !ok {
				continue
			}
		}
		// A backslash at the end of a line joins the next to it, both gone, as in the shell.
		for strings.HasSuffix(line, `\`) && i < len(b.Lines) {
			line = line[:len(line)-1] + b.Lines[i]
			i++
		}
		var shown []string
		for ; i < len(b.Lines); i++ {
			l := b.Lines[i]
			if prompted && strings.HasPrefix(l, "$ ") {
				break
			}
			if !prompted {
				var ok bool
				if l, ok = strings.CutPrefix(strings.TrimSpace(l), "#"); !ok {
					break
				}
				l = strings.TrimPrefix(l, " ")
			}
			shown = append(shown, l)
		}
		output := strings.Join(shown, "\n")
		if output == "" && i == len(b.Lines) && next != nil {
			output = strings.Join(next.Lines, "\n")
		}
		for _, args := range split(line) {
			out = append(out, Command{Line: b.Line + start, Text: strings.TrimSpace(line), Args: args, Output: output})
		}
	}
	return out
}

func prompted(b Block) bool {
	return slices.ContainsFunc(b.Lines, func(l string) bool { return strings.HasPrefix(l, "$ ") })
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// split reads one shell line into its simple commands, as the shell would split them at | ||
// & && and ;: their words with quotes and backslashes removed; a NAME=value word before a
// command's first, a redirection (> >> < 2> &> 2>&1) and its target, and a # comment left
// out. It does not expand anything: $VAR and ~ stay as they are.
func split(line string) [][]string {
	var (
		cmds     [][]string
		cur      []string
		word     strings.Builder
		inWord   bool
		redirect bool // the next word is a redirection's target
	)
	endWord := func() {
		if !inWord {
			return
		}
		w := word.String()
		word.Reset()
		inWord = false
		switch {
		case redirect:
			redirect = false
		case len(cur) == 0 && assignment.MatchString(w):
		default:
			cur = append(cur, w)
		}
	}
	endCommand := func() {
		endWord()
		if len(cur) > 0 {
			cmds = append(cmds, cur)
		}
		cur, redirect = nil, false
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		next := byte(0)
		if i+1 < len(line) {
			next = line[i+1]
		}
		switch {
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				j = len(line) - i - 1 // unclosed: the rest of the line
			}
			word.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '"':
			inWord = true
			for i++; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0 {
					i++
				}
				word.WriteByte(line[i])
			}
		case c == '\\' && next != 0:
			word.WriteByte(next)
			inWord = true
			i++
		case c == ' ' || c == '\t':
			endWord()
		case c == '#' && !inWord:
			i = len(line)
		case c == '>' || c == '<' || c == '&' && next == '>':
			if w := word.String(); inWord && strings.Trim(w, "0123456789") == "" {
				word.Reset() // the file descriptor of 2>: part of the redirection
				inWord = false
			}
			endWord()
			for i+1 < len(line) && (line[i+1] == '>' || line[i+1] == '&') {
				i++
			}
			redirect = true
		case c == '|' || c == '&' || c == ';':
			endCommand()
			if next == c && c != ';' {
				i++
			}
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	endCommand()
	return cmds
}
