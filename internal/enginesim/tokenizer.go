package enginesim

import (
	"hash/fnv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The tokenizer approximation, shaped like a byte-level BPE tokenizer on
// unusual text. Text is split on white space into words. In a word, each
// run of ASCII letters and digits is cut into pieces of at most
// bytesPerToken bytes (a run of b bytes is ceil(b/4) tokens); every other
// character is a token of its own (punctuation, symbols, CJK and other
// non-ASCII letters), and a character of four UTF-8 bytes (emoji and the
// rest beyond the Basic Multilingual Plane) is two. English prose is then
// close to bytes/4 tokens, while CJK (three bytes a character), emoji and
// runs of punctuation are well above it. A token's id is a hash of its
// piece, so equal text always tokenizes the same. Chat messages add
// chatMessageOverhead tokens each (role markers) and the reply adds
// chatReplyOverhead (the assistant header), roughly what chat templates
// cost.
//
// Generated text is made of words of one to four letters, each preceded by
// a space, so re-tokenizing a completion gives back completion_tokens.
const (
	bytesPerToken       = 4
	chatMessageOverhead = 4
	chatReplyOverhead   = 3
	vocabSize           = 128000
	// specialBase is where the ids of template tokens start.
	specialBase = vocabSize
)

func isAlnum(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// eachPiece calls yield with the text piece of every token of text.
func eachPiece(text string, yield func(piece string)) {
	for _, w := range strings.FieldsFunc(text, unicode.IsSpace) {
		for i := 0; i < len(w); {
			if isAlnum(w[i]) {
				j := i + 1
				for j < len(w) && j-i < bytesPerToken && isAlnum(w[j]) {
					j++
				}
				yield(w[i:j])
				i = j
				continue
			}
			_, size := utf8.DecodeRuneInString(w[i:])
			if size == 4 {
				yield(w[i : i+2])
				yield(w[i+2 : i+4])
			} else {
				yield(w[i : i+size])
			}
			i += size
		}
	}
}

// countTokens returns the token count of text.
func countTokens(text string) int {
	n := 0
	eachPiece(text, func(string) { n++ })
	return n
}

// appendTokens appends the token ids of text to ids.
func appendTokens(ids []int, text string) []int {
	eachPiece(text, func(p string) {
		h := fnv.New32a()
		_, _ = h.Write([]byte(p))
		ids = append(ids, int(h.Sum32()%vocabSize))
	})
	return ids
}

// chatMessage is one message of a chat prompt, reduced to its text.
type chatMessage struct {
	Role string
	Text string
	// Media counts the message's images, audio clips and videos; each is
	// a placeholder in Text. Not part of the key that seeds a request's
	// output (json "-"): text-only prompts keep the lengths they had.
	Media [mediaKinds]int `json:"-"`
}

// chatTokens returns the token ids of a chat prompt.
func chatTokens(msgs []chatMessage) []int {
	var ids []int
	for _, m := range msgs {
		for i := range chatMessageOverhead {
			ids = append(ids, specialBase+i)
		}
		ids = appendTokens(ids, m.Text)
	}
	for i := range chatReplyOverhead {
		ids = append(ids, specialBase+chatMessageOverhead+i)
	}
	return ids
}

// countChatTokens is len(chatTokens(msgs)) without building the slice.
func countChatTokens(msgs []chatMessage) int {
	n := chatReplyOverhead
	for _, m := range msgs {
		n += chatMessageOverhead + countTokens(m.Text)
	}
	return n
}

// words are the pieces generated text is made of: one token each.
var words = []string{
	"the", "a", "of", "to", "and", "in", "is", "it", "that", "for",
	"on", "was", "with", "as", "be", "at", "by", "this", "from", "or",
	"an", "but", "not", "are", "have", "they", "we", "you", "all", "can",
	"more", "one", "will", "when", "each", "such", "time", "data", "then", "so",
	"ok", "also", "into", "over", "only", "some", "very", "just", "much", "well",
}

// tokenText is the text of output token pos of a sequence with key k.
func tokenText(k uint64, pos int) string {
	return " " + words[mix(k, uint64(pos))%uint64(len(words))]
}

// mix is a SplitMix64 step of a and b: a cheap, deterministic hash.
func mix(a, b uint64) uint64 {
	z := a ^ (b+0x9e3779b97f4a7c15)*0xbf58476d1ce4e5b9
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// hashString hashes s for mix.
func hashString(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}
