"""PERSON and CN_ADDRESS: people's names and postal addresses, Chinese and English.

Chinese text is segmented and part-of-speech tagged by jieba (``rjieba``, the Rust
port, with the dictionary its package ships — nothing is downloaded). A word tagged as
a person's name counts when it starts with a Chinese surname; an address is a run of
place words (``北京市``, ``朝阳区``) continued through road, number and building words
and trimmed back to its last address-ending word (``号``, ``室``, ``栋`` …). English
names and street addresses are found by patterns with titles, cue words and a list of
common first names. How well this works is measured in docs/redaction-quality.md.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterator
from functools import cache
from itertools import accumulate
from operator import itemgetter

from localgate.redaction.findings import Finding
from localgate.redaction.recognizers import Prefilters, Scan, matches_at

__all__ = ["NameRecognizer"]

_CJK = re.compile(r"[\u4e00-\u9fff]")
# What str.isspace and \s (in a str pattern) call whitespace.
_WHITESPACE_CHARS = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)

# The most common single-character surnames (covering well over 90% of the population)
# and the compound surnames still in use.
_SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程"
    "苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛"
    "郝龚邵万钱严覃武戴莫孔向汤常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦"
    "俞左柳甘祝包宁尚符舒阮柯纪梅童凌毕单季裴霍涂成苗谷盛曲翁冉骆蓝路游辛靳管柴蒙鲍华喻祁蒲房"
    "滕屈饶解牟艾尤阳时穆农司卓古吉缪简车项连芦麦褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂全佟应"
    "臧闵苟邬边卞姬师和仇栾隋商刁沙荣巫寇桑郎甄丛仲虞敖巩明佘池查麻苑迟邝"
)
_COMPOUND_SURNAMES = frozenset(
    {"欧阳", "司马", "诸葛", "上官", "东方", "皇甫", "尉迟", "公孙", "慕容", "长孙", "宇文",
     "司徒", "夏侯", "令狐", "端木", "独孤", "南宫", "西门", "百里", "呼延", "轩辕"}
)  # fmt: skip
_NAME_TAGS = frozenset({"nr", "nrfg", "nrt"})
# Words jieba tags as names that are far more often ordinary words.
_NOT_NAMES = frozenset(
    {"高明", "金山", "武汉", "文明", "方便", "明白", "高兴", "安全", "常规", "谢谢", "于是", "万一",
     "方向", "常常", "安静", "江湖", "包括", "成功", "成本", "成都", "程序", "龙头", "黄金", "白色",
     "荣耀", "黄金周", "阳光", "高新", "金融", "文化", "高端", "高速", "明天", "明年", "周末",
     "周年", "温度", "温馨", "华为", "平安", "康复", "安装", "常见", "史上", "严重", "包装"}
)  # fmt: skip
# jieba's HMM sometimes glues the next verb or particle onto a name (张伟住, 李娜说): a
# three-character "name" ending in one of these is cut back to two characters.
_GLUED = frozenset(
    "住在说和是的了也都就要会来去到把被给让对向从跟与及等请问称讲写打发告叫反投致办咨询申表希需想"
    "已曾将还又再能可于先女小经老医主同使登用确签"
)
# Characters that end given names too (朱思本, 李国电) but, before these, begin the word
# that follows a name instead: 张伟回电, 王芳电话, 李娜本人, 联系人王芳您好. Cut only there,
# and never into a common word (客户高明回电 keeps 高明回: see _unglued).
_GLUED_BEFORE = {
    "们": ("",),  # whatever follows: no name ends in it (张伟们)
    "回": tuple("电复拨访来家信款去到"),
    "电": tuple("话邮联"),
    "手": ("机",),
    "本": tuple("人月周次年"),
    "盖": ("章",),
    "您": ("好",),
    "你": ("好",),
}
# Roles that introduce a name (客户彭志强, 联系人：欧阳娜娜) and titles that follow one.
_NAME_CUES = (
    "客户", "用户", "患者", "病人", "联系人", "姓名", "员工", "经办人", "申请人", "收件人",
    "收货人", "负责人", "投诉人", "家属", "学生", "持卡人", "被保险人", "乘客", "住户", "业主",
    "租客", "车主", "发件人", "兹证明", "联系", "致", "签名", "法人", "法定代表人", "审批人",
    "经手人", "司机", "房东", "户主", "本人", "Hi", "您好",
)  # fmt: skip
_TITLES_AFTER = ("先生", "女士", "小姐", "老师", "经理", "医生", "主任", "教授", "同学", "总监")
_ORGANISATION_WORDS = ("公司", "集团", "有限", "物流", "科技", "银行", "医院", "学校", "大学")
_NOT_PERSON_ENDINGS = (
    "大厦", "广场", "中心", "公司", "集团", "银行", "医院", "学校", "大学", "路", "街", "区", "市",
    "省", "县", "镇", "村", "店", "厂", "局", "部", "所",
)  # fmt: skip

_ADMIN_SUFFIXES = ("省", "市", "区", "县", "州", "自治区", "特别行政区", "新区", "盟", "旗")
_PROVINCES = (
    "北京", "天津", "上海", "重庆", "河北", "山西", "辽宁", "吉林", "黑龙江", "江苏", "浙江",
    "安徽", "福建", "江西", "山东", "河南", "湖北", "湖南", "广东", "海南", "四川", "贵州",
    "云南", "陕西", "甘肃", "青海", "台湾", "内蒙古", "广西", "西藏", "宁夏", "新疆", "香港",
    "澳门",
)  # fmt: skip
# Words that may end an address, and the suffixes that make a word address-like.
_ADDRESS_ENDINGS = (
    "号", "室", "层", "楼", "栋", "幢", "座", "单元", "弄", "巷", "胡同", "路", "街", "大道", "村",
    "小区", "大厦", "广场", "公寓", "花园", "中心", "苑", "段",
)  # fmt: skip
# The endings by length, to test a word's last one and two characters against in a set
# lookup each, instead of endswith trying all 23.
_ADDRESS_ENDINGS_1 = frozenset(ending for ending in _ADDRESS_ENDINGS if len(ending) == 1)
_ADDRESS_ENDINGS_2 = frozenset(ending for ending in _ADDRESS_ENDINGS if len(ending) == 2)
_ADDRESS_JOINERS = frozenset({"-", "#"})  # text arrives width-folded
# Words that end an address run even though they are Chinese words.
_ADDRESS_STOPS = frozenset(
    {"的", "和", "与", "及", "或", "是", "在", "到", "了", "给", "请", "电话", "手机"}
)
_MAX_ADDRESS = 60

_EN_FIRST_NAMES = (
    "James|John|Robert|Michael|William|David|Richard|Joseph|Thomas|Charles|Christopher|Daniel|"
    "Matthew|Anthony|Mark|Donald|Steven|Paul|Andrew|Joshua|Kenneth|Kevin|Brian|George|Timothy|"
    "Ronald|Edward|Jason|Jeffrey|Ryan|Jacob|Gary|Nicholas|Eric|Jonathan|Stephen|Larry|Justin|Scott|"
    "Brandon|Benjamin|Samuel|Gregory|Alexander|Frank|Patrick|Raymond|Jack|Dennis|Jerry|Tyler|Aaron|"
    "Henry|Peter|Adam|Nathan|Zachary|Douglas|Kyle|Noah|Ethan|Jeremy|Walter|Christian|Keith|Roger|"
    "Terry|Austin|Sean|Gerald|Carl|Harold|Dylan|Arthur|Lawrence|Jordan|Jesse|Bryan|Billy|Bruce|"
    "Gabriel|Joe|Logan|Albert|Willie|Alan|Eugene|Russell|Vincent|Philip|Bobby|Johnny|Bradley|Oliver|"
    "Lucas|Liam|Mason|Mary|Patricia|Jennifer|Linda|Elizabeth|Barbara|Susan|Jessica|Sarah|Karen|"
    "Lisa|Nancy|Betty|Margaret|Sandra|Ashley|Kimberly|Emily|Donna|Michelle|Carol|Amanda|Dorothy|"
    "Melissa|Deborah|Stephanie|Rebecca|Sharon|Laura|Cynthia|Kathleen|Amy|Angela|Shirley|Anna|"
    "Brenda|Pamela|Emma|Nicole|Helen|Samantha|Katherine|Christine|Debra|Rachel|Carolyn|Janet|"
    "Catherine|Maria|Heather|Diane|Ruth|Julie|Olivia|Joyce|Virginia|Victoria|Kelly|Lauren|Christina|"
    "Joan|Evelyn|Judith|Megan|Andrea|Cheryl|Hannah|Jacqueline|Martha|Gloria|Teresa|Ann|Sara|"
    "Madison|Frances|Kathryn|Janice|Jean|Abigail|Alice|Julia|Judy|Sophia|Grace|Denise|Amber|"
    "Doris|Marilyn|Danielle|Beverly|Isabella|Theresa|Diana|Natalie|Brittany|Charlotte|Marie|"
    "Kayla|Alexis|Lori|Ava|Mia|Chloe|Ella|Lily|Zoe|Wei|Li|Ming|Hui|Jing|Yan|Lei|Hans|Anna|Pierre|"
    "Marco|Luca|Giulia|Sofia|Carlos|Juan|Jose|Ana|Lucia|Ahmed|Mohammed|Fatima|Yuki|Hiroshi|Kenji|"
    "Sophie|Priya|Mei|Raj|Arjun|Ananya|Rohan|Aisha|Omar|Hassan|Leila|Chen|Ling|Xin|Jun|Tao|Feng|"
    "Hao|Sakura|Haruto|Min|Ji|Seo|Hyun|Linh|Anh|Ivan|Olga|Dmitri|Elena|Sergei|Lars|Ingrid|Sven|"
    "Emil|Noor|Zara|Leo|Max|Finn|Ben|Sam|Tom|Tim|Jim|Bob|Bill|Kate|Lucy|Molly|Ellie|Ruby|Amelia|"
    "Harper|Aria|Scarlett|Layla|Nora|Hazel|Violet|Aurora|Stella|Claire|Paula|Diego|Mateo|"
    "Santiago|Valentina|Camila|Isabel|Gabriela|Fernando|Ricardo|Pedro"
)
# A capitalised word of a name, Irish and Scottish surnames too (O'Brien, McDonald).
_CAP = r"(?:O['\u2019]|Mc|Mac)?[A-Z][a-z]+(?:[-'\u2019][A-Z][a-z]+)?"
# One to six capitalised words: the candidates for an English name (six: a name after
# other capitalised words, "New Apple MacBook Mary Jones returned it").
_EN_CANDIDATE = re.compile(
    r"[A-Z](?<![A-Za-z][A-Z])(?:(?<=O)['\u2019][A-Z]|(?<=M)a?c[A-Z])?[a-z]+(?:[-'\u2019][A-Z][a-z]+)?"
    r"(?:(?: [A-Z]\.)?[ ]" + _CAP + r"){0,5}\b"
)
_EN_CUES = frozenset(
    {"name", "customer", "patient", "client", "employee", "contact", "dear", "signed", "attn",
     "applicant", "cardholder", "insured", "tenant", "guest", "passenger", "user"}
)  # fmt: skip
_FIRST_NAMES = frozenset(_EN_FIRST_NAMES.split("|"))
_EN_CUE_WORDS = tuple(sorted(_EN_CUES))
_TITLE_WORDS = ("Mr", "Mrs", "Ms", "Miss", "Dr", "Prof", "Sir", "Madam")
_TITLES = frozenset({*_TITLE_WORDS, "Dear"})
# Greetings before a name ("Hi Patricia Garcia,"): not part of it, and not a cue either:
# what follows must still start with a common first name ("Hi Product Team" is no one).
# Alone, a greeting is a word like any other (after a title, "Mr Hi" is taken for a name,
# as one capitalised word after a title always is).
_GREETINGS = frozenset({"Hi", "Hello", "Hey", "Thanks"})
_EN_NOT_SURNAMES = frozenset(
    {"Street", "Road", "Avenue", "Lane", "Drive", "Team", "Support", "Inc", "Ltd", "Corp", "Monday",
     "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "The", "And", "From"}
)  # fmt: skip
_STREET_TYPES = (
    "Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Way|Parkway|Pkwy|"
    "Place|Pl|Square|Sq|Terrace|Highway|Hwy|Circle|Trail"
)
_EN_ADDRESS = re.compile(
    r"[0-9](?<![0-9A-Za-z][0-9])[0-9]{0,5}\s+(?:[A-Z][A-Za-z]+\s+){1,4}"
    r"(?:" + _STREET_TYPES + r")\b\.?"
    r"(?:,?\s+(?:Suite|Ste|Apt|Unit|Floor|Fl|#)\.?\s*[A-Za-z0-9-]+)?"
    r"(?:,\s+[A-Z][a-z]+(?:\s+[A-Z][a-z]+){0,2})?"
    r"(?:,\s+[A-Z]{2}(?:\s+\d{5}(?:-\d{4})?)?)?"
)


class NameRecognizer:
    """Finds PERSON and CN_ADDRESS spans."""

    def __init__(self) -> None:
        self._gates = _gates()
        # For the detector's prefilter pass, which then says which of them match.
        self.gates = _GATE_PATTERNS

    def find(self, scan: Scan) -> Iterator[Finding]:
        """Names and addresses in the text."""
        text = scan.folded
        # One RE2 pass says which rules can find anything at all; most texts need few.
        matching = scan.matching(self.gates)
        if matching is None:
            hits, index = self._gates.hits(text), self._gates.index
            matching = [index[gate] in hits for gate in self.gates]
        cjk, cued, titled, compound, english_name, english_address = matching
        if cjk:
            yield from _chinese(
                text, _cjk_stretches(text), cued=cued, titled=titled, compound=compound
            )
        if english_name:
            yield from _english_people(text)
        if english_address:
            yield from _english_addresses(text)


# Python's \s (str patterns) as an RE2 class: RE2's own \s is ASCII only.
_WHITESPACE = "[" + "".join(f"\\x{{{ord(char):x}}}" for char in _WHITESPACE_CHARS) + "]"
# For each rule, an RE2 pattern that matches wherever the rule finds something. Each is
# implied by its rule (weaker, never stronger): a text it does not match has nothing for
# that rule, so skipping the rule there changes no finding.
_GATE_PATTERNS = (
    r"[\x{4e00}-\x{9fff}]",
    "|".join(_NAME_CUES),
    "|".join(_TITLES_AFTER),
    "|".join(sorted(_COMPOUND_SURNAMES)),
    # A title right before a capitalised word, or two capitalised words in a row (an
    # initial may stand between): what _english_people needs.
    r"(?:Mr|Mrs|Ms|Miss|Dr|Prof|Sir|Madam)\.?" + _WHITESPACE + r"+[A-Z]"
    r"|[A-Z][a-z]+(?:[-'\x{2019}][A-Z][a-z]+)? (?:[A-Z]\. )?(?:O['\x{2019}])?[A-Z][a-z]",
    # _EN_ADDRESS without its look-behind, with \b ASCII-only (weaker).
    r"[0-9]{1,6}" + _WHITESPACE + r"+(?:[A-Z][A-Za-z]+" + _WHITESPACE + r"+){1,4}"
    r"(?:" + _STREET_TYPES + r")\b",
)


@cache
def _gates() -> Prefilters:
    """The gates in one RE2 set, for a scan the detector has not run them on."""
    return Prefilters(_GATE_PATTERNS)


@cache
def _tagger() -> object:
    import rjieba

    return rjieba


def _cjk_stretches(text: str) -> list[tuple[int, int]]:
    """The stretches of ``text`` to segment: the lines that hold Chinese characters, and
    of a long line only the parts with Chinese, cut after a space or a newline.

    jieba segments runs of Chinese characters, letters, digits and a few signs (its
    "blocks") one by one and makes every other character a word of its own (a CR LF
    pair one word), so a cut after a space or a newline is a cut between words:
    segmenting these stretches alone gives the words it gives for them in the whole
    text. Every Chinese rule needs a Chinese character, and no address runs on through
    a space or a newline; so lines without Chinese (English prose, logs, JSON) and long
    runs of other text between Chinese sentences on one line (a mixed prompt) are not
    segmented.
    """
    stretches: list[tuple[int, int]] = []
    found = _CJK.search(text)
    while found is not None:
        at = found.start()
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at) + 1 or len(text)
        pieces = [(start, end)] if end - start < _LONG_LINE else _without_gaps(text, start, end, at)
        for low, high in pieces:
            if stretches and stretches[-1][1] == low:
                stretches[-1] = (stretches[-1][0], high)
            else:
                stretches.append((low, high))
        found = _CJK.search(text, end)
    return stretches


def _without_gaps(text: str, start: int, end: int, first: int) -> list[tuple[int, int]]:
    """The parts of line ``text[start:end]`` (its first Chinese character at ``first``)
    without the long runs of other text that can be cut out."""
    pieces: list[tuple[int, int]] = []
    low = _last_cut(text, start, first) or start
    for gap in _CJK_GAP.finditer(text, first, end):
        cut, resume = _first_cut(text, gap.start() + 1, gap.end()), _last_cut(text, *gap.span())
        if cut is not None and resume is not None and cut < resume:
            pieces.append((low, cut))
            low = resume
    if _CJK.search(text, low, end):
        pieces.append((low, end))
    return pieces


# A Chinese character and the run of other text after it, if long: cut out if it can be.
# Shorter runs cost less to segment than to look for cuts in, and so do short lines.
# The run is a class of the ranges around the ideographs, not [^\u4e00-\u9fff]: re
# tests a negated class more slowly (83,000 against 67,000 instructions for the 1.5 KB
# prompt).
_CJK_GAP = re.compile(r"[\u4e00-\u9fff][\x00-\u4dff\ua000-\U0010ffff]{64,}")
_LONG_LINE = 256


def _first_cut(text: str, low: int, high: int) -> int | None:
    """Just after the first space or newline in ``text[low:high]``, if any."""
    space, newline = text.find(" ", low, high), text.find("\n", low, high)
    at = max(space, newline) if space < 0 or newline < 0 else min(space, newline)
    return None if at < 0 else at + 1


def _last_cut(text: str, low: int, high: int) -> int | None:
    """Just after the last space or newline in ``text[low:high]``, if any."""
    at = max(text.rfind(" ", low, high), text.rfind("\n", low, high))
    return None if at < 0 else at + 1


class _Words:
    """jieba's words and part-of-speech tags, with their offsets into the text.

    A text holds hundreds of words and the rules want a handful (names, place words and
    what follows them): those are picked out in C, from one string of all the tags,
    instead of visiting every word in Python.
    """

    __slots__ = ("_tag_text", "starts", "stretches", "tagged")

    def __init__(self, text: str, stretches: list[tuple[int, int]]) -> None:
        tag = _tagger().tag  # type: ignore[attr-defined]
        self.stretches = stretches  # the parts of the text segmented, in order
        self.tagged: list[tuple[str, str]] = []
        self.starts: list[int] = []  # where each word starts in the text
        for low, high in stretches:
            part = text[low:high]
            tagged: list[tuple[str, str]] = tag(part)
            starts = list(accumulate(map(len, map(_WORD, tagged)), initial=low))
            if starts.pop() == high:
                # The usual case: the words are the text, cut into pieces.
                self.tagged += tagged
                self.starts += starts
                continue
            position = 0
            for word, word_tag in tagged:
                start = part.find(word, position)
                if start < 0:  # the tagger changed the text somehow; resynchronise
                    continue
                position = start + len(word)
                self.tagged.append((word, word_tag))
                self.starts.append(low + start)
        self._tag_text = " " + " ".join(map(_TAG, self.tagged)) + " "

    def tagged_as(self, tags: re.Pattern[str]) -> list[int]:
        """Indices of the words whose tag matches ``tags`` (between spaces), in order."""
        found = []
        index = position = 0
        tag_text = self._tag_text
        for match in tags.finditer(tag_text):
            index += tag_text.count(" ", position, match.start())
            position = match.start()
            found.append(index)
        return found

    def index_at(self, offset: int) -> int | None:
        """The index of the word that starts at ``offset``, if one does."""
        index = bisect_left(self.starts, offset)
        return index if index < len(self.starts) and self.starts[index] == offset else None

    def end(self, index: int) -> int:
        """Where word ``index`` ends."""
        return self.starts[index] + len(self.tagged[index][0])


_WORD = itemgetter(0)
_TAG = itemgetter(1)
# The tags jieba gives the given name it split off a surname (志强 nrfg, 娜娜 nrt, 建华 nz,
# 欣怡 i); and those of given names that are also ordinary words (浩然 a, 立新 d, 国庆 t),
# which count only where the surname starts a field (after a form's label, in a CSV
# cell): in running text 史 + 正常 is 婚育史正常 and 毛 + 特别 is 掉毛特别. The
# common words with those tags that follow a lone surname (佟已经, 郝不错 …) never count.
_GIVEN_NAME_TAGS = frozenset({"nr", "nrt", "nrfg", "nz", "i"})
_WORD_LIKE_GIVEN_NAME_TAGS = frozenset({"a", "d", "t"})
_NOT_GIVEN_NAMES = frozenset(
    {"已经", "不错", "今天", "明天", "昨天", "现在", "非常", "马上", "一直", "也许", "可能", "已",
     "都", "也", "还", "就", "才", "又", "再", "很", "最", "更", "不", "没", "好", "大", "小",
     "总", "刚", "正在", "曾经", "将", "仍", "一定", "必须", "当时", "今年", "去年", "明年",
     "以前", "之前", "之后", "后来", "目前", "刚才", "立即", "立刻", "已然", "真的", "太"}
)  # fmt: skip
_NAME_TAG_TEXT = re.compile(r" (?:nr|nrfg|nrt)(?= )")
_PLACE_TAG_TEXT = re.compile(r" ns(?= )")
_COMPOUND = re.compile("|".join(sorted(_COMPOUND_SURNAMES)))


def _chinese(
    text: str,
    stretches: list[tuple[int, int]],
    cued: bool = True,
    titled: bool = True,
    compound: bool = True,
) -> Iterator[Finding]:
    words = _Words(text, stretches)
    yield from _chinese_people(text, words, compound)
    if cued or titled:
        yield from _cued_people(text, words, cued, titled)
    yield from _chinese_addresses(words)


@cache
def _cued_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    surname = (
        "(?:" + "|".join(sorted(_COMPOUND_SURNAMES)) + "|[" + "".join(sorted(_SURNAMES)) + "])"
    )
    after_cue = re.compile(
        "(?:" + "|".join(_NAME_CUES) + r")[：:\s]{0,2}(" + surname + r"[\u4e00-\u9fff]{1,2})"
    )
    before_title = re.compile(
        "(" + surname + r"[\u4e00-\u9fff]{1,2}?)(?:" + "|".join(_TITLES_AFTER) + ")"
    )
    return after_cue, before_title


def _cued_people(text: str, words: _Words, cued: bool, titled: bool) -> Iterator[Finding]:
    """Names the segmenter missed, found by a role before them or a title after them."""
    after_cue, before_title = _cued_patterns()
    # A name is Chinese characters, so it lies in a segmented stretch, and it must start
    # a word there; its cue ends at most two characters before it. The cue pattern is
    # searched only from that far before each stretch to its end (the windows merged
    # where they meet), not through the English between them: every match the whole
    # text has lies in one window, and none crosses a window's start. _cued_people on the
    # 1.5 KB mixed prompt: 141,000 -> 85,000 instructions compiled (callgrind).
    windows = _cue_windows(words.stretches) if cued else []
    # A name before a title starts two to four characters before it (a surname of one
    # or two, a given name of one or two): the pattern is tried only there, not at every
    # surname character. Name and title are Chinese, so only the stretches are looked in.
    title_starts = (
        {
            at - length
            for at in _occurrences_within(text, _TITLES_AFTER, words.stretches)
            for length in (2, 3, 4)
            if at >= length
        }
        if titled
        else set()
    )
    for matches, score in (
        ([m for low, high in windows for m in after_cue.finditer(text, low, high)], 0.85),
        (matches_at(before_title, text, sorted(title_starts)), 0.8),
    ):
        for match in matches:
            name = match.group(1)
            start = match.start(1)
            # A name starts a word: 担任产品经理 has no 任产品 in it. But jieba glues some
            # names onto the end of the cue before them (客户王 + 芳, 联系 + 人马 + 伟,
            # 投诉 + 人孙伟): a word that begins in the cue and ends in the name, after its
            # surname, starts the name too.
            if words.index_at(start) is None and not _glued_to_cue(
                words, match.start(), start, name
            ):
                continue
            name = _unglued(text, start, name)
            if name in _NOT_NAMES or name.endswith(_NOT_PERSON_ENDINGS):
                continue
            if any(word in text[start : start + len(name) + 8] for word in _ORGANISATION_WORDS):
                continue  # 成都锦程物流有限公司 is a company
            yield Finding(start, start + len(name), "PERSON", score)


def _unglued(text: str, start: int, name: str) -> str:
    """``name`` (at ``start`` in ``text``) without the characters the next word lent it;
    but never cut into a common word (客户高明回电: 高明回 is a name, 高明 alone is not)."""
    cut, lent = name, False
    while len(cut) > 2:
        last = cut[-1]
        follows = _GLUED_BEFORE.get(last)
        if last not in _GLUED:
            if follows is None or not text.startswith(follows, start + len(cut)):
                break
            lent = True
        cut = cut[:-1]
    # A glued verb or particle cut off a common word leaves no name (客户明天再来: 明天,
    # dropped by the caller); a character that also ends given names does not decide it.
    return name if lent and cut in _NOT_NAMES else cut


def _glued_to_cue(words: _Words, cue_start: int, start: int, name: str) -> bool:
    """Whether the word around ``start`` began in the cue (at ``cue_start`` or later)
    and ends in ``name`` (at ``start``), after the surname it begins with; a word that
    holds the whole cue, right after the surname."""
    index = bisect_left(words.starts, start) - 1
    if index < 0 or words.starts[index] < cue_start:
        return False
    surname = start + (2 if name[:2] in _COMPOUND_SURNAMES else 1)
    end = words.end(index)
    if words.starts[index] == cue_start:
        # The whole cue and more in one word: only the surname may be glued on (客户王),
        # or it is a word of its own (联系方式 is not 联系 + 方式).
        return end == surname
    return surname <= end <= start + len(name)


# How far before a name its cue can start: the longest cue and two separators.
_CUE_REACH = max(map(len, _NAME_CUES)) + 2


def _cue_windows(stretches: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The stretches, each widened to start ``_CUE_REACH`` characters earlier, merged
    where they then meet or overlap."""
    windows: list[tuple[int, int]] = []
    for low, high in stretches:
        low = max(0, low - _CUE_REACH)
        if windows and windows[-1][1] >= low:
            windows[-1] = (windows[-1][0], high)
        else:
            windows.append((low, high))
    return windows


def _occurrences_within(
    text: str, needles: tuple[str, ...], spans: list[tuple[int, int]]
) -> list[int]:
    """Where any of ``needles`` lies wholly inside one of ``spans`` of ``text``."""
    found = []
    for needle in needles:
        for low, high in spans:
            at = text.find(needle, low, high)
            while at >= 0:
                found.append(at)
                at = text.find(needle, at + 1, high)
    return found


def _chinese_people(text: str, words: _Words, compound: bool = True) -> Iterator[Finding]:
    tagged = words.tagged
    # Only words tagged as names and compound surnames (if the text has one) can start a
    # name; they are picked out in C, and the loop below visits them alone, in order.
    candidates = words.tagged_as(_NAME_TAG_TEXT)
    if compound:
        # No compound surname ends with another's first character: the matches are
        # every occurrence.
        compounds = (words.index_at(match.start()) for match in _COMPOUND.finditer(text))
        candidates = sorted({*candidates, *(index for index in compounds if index is not None)})
    for index in candidates:
        word, tag = tagged[index]
        start = words.starts[index]
        end = start + len(word)
        # jieba splits compound surnames off as place words: 欧阳 + 娜娜.
        if word in _COMPOUND_SURNAMES and index + 1 < len(tagged):
            next_word, next_tag = tagged[index + 1]
            joined = (
                1 <= len(next_word) <= 2
                and _CJK.match(next_word) is not None
                and words.starts[index + 1] == end
            )
            if joined and next_tag not in ("x", "uj", "ul", "p", "c", "d", "r", "v"):
                yield Finding(start, end + len(next_word), "PERSON", 0.85)
                continue
        if tag not in _NAME_TAGS:
            continue
        # jieba splits a surname off its given name too, tagging the surname alone as a
        # name: 董 + 立新, 闫 + 娜娜, 潘 + 娜娜.
        if len(word) == 1 and word in _SURNAMES and index + 1 < len(tagged):
            next_word, next_tag = tagged[index + 1]
            if (
                1 <= len(next_word) <= 2
                and words.starts[index + 1] == end
                and _ideographs(next_word)
                and next_word not in _NOT_GIVEN_NAMES
                and (
                    next_tag in _GIVEN_NAME_TAGS
                    or (next_tag in _WORD_LIKE_GIVEN_NAME_TAGS and _field_starts_at(text, start))
                )
            ):
                yield Finding(start, end + len(next_word), "PERSON", 0.75)
            continue
        if len(word) == 3 and word[:2] not in _COMPOUND_SURNAMES:
            word = _unglued(text, start, word)
            end = start + len(word)
        if word in _NOT_NAMES or not 2 <= len(word) <= 4 or len(set(word)) == 1:
            continue
        if word.endswith(_NOT_PERSON_ENDINGS):
            continue
        has_surname = word[:2] in _COMPOUND_SURNAMES or word[0] in _SURNAMES
        if has_surname and _ideographs(word):
            yield Finding(start, end, "PERSON", 0.8 if len(word) > 2 else 0.75)


def _ideographs(word: str) -> bool:
    """Whether ``word`` is all CJK unified ideographs (what a Chinese name is written in)."""
    return all("\u4e00" <= char <= "\u9fff" for char in word)


def _field_starts_at(text: str, start: int) -> bool:
    """Whether a field, list item or cell starts at ``start``: the text's or a line's
    start, or a separator before it (spaces aside)."""
    index = start - 1
    while index >= 0 and text[index] in " \t\u3000":
        index -= 1
    return index < 0 or text[index] in _FIELD_SEPARATORS


# What ends a line, a form's label, a list's item or a table's cell before a value.
_FIELD_SEPARATORS = frozenset(":：,，、;；|=\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _chinese_addresses(words: _Words) -> Iterator[Finding]:
    tagged = words.tagged
    index = 0  # the first word not yet inside an address
    # An address starts at a place word: the others are skipped without a Python loop.
    for place in words.tagged_as(_PLACE_TAG_TEXT):
        if place < index:
            continue
        index = place
        word = tagged[index][0]
        if not (word.endswith(_ADMIN_SUFFIXES) or word.startswith(_PROVINCES)):
            index += 1
            continue
        starts = words.starts
        start = starts[index]
        last_ending = None
        cursor = index + 1
        while cursor < len(tagged):
            token_word = tagged[cursor][0]
            if starts[cursor] + len(token_word) - start > _MAX_ADDRESS:
                break
            # Road and building names take every part of speech (高新路, 珞喻路, 五常大道):
            # any word or number continues the address; the span is cut back to its
            # last address-ending word afterwards.
            addressy = (
                token_word.isalnum()
                or _CJK.match(token_word) is not None
                or token_word in _ADDRESS_JOINERS
            )
            if not addressy or token_word in _ADDRESS_STOPS:
                break
            # token_word.endswith(_ADDRESS_ENDINGS): the endings are one or two long.
            if token_word[-1:] in _ADDRESS_ENDINGS_1 or token_word[-2:] in _ADDRESS_ENDINGS_2:
                last_ending = cursor
            cursor += 1
        if last_ending is not None:
            yield Finding(start, words.end(last_ending), "CN_ADDRESS", 0.85)
            index = last_ending + 1
        else:
            index += 1


def _english_people(text: str) -> Iterator[Finding]:
    for match in _EN_CANDIDATE.finditer(text):
        group = match.group()
        if " " not in group:
            # One word (most candidates: any capitalised word): a name only right after
            # a title ("Mr. Smith"); a cue or title itself is none.
            if group in _TITLES or group in _EN_NOT_SURNAMES or group.lower() in _EN_CUES:
                continue
            start = match.start()
            if _after_title(text[max(0, start - 16) : start]):
                yield Finding(start, match.end(), "PERSON", 0.8)
            continue
        words = [word for word in group.split(" ") if not word.endswith(".")]
        offset = 0
        # "Customer Patricia King": the cue word is not part of the name.
        while words and (
            words[0].lower() in _EN_CUES
            or words[0] in _TITLES
            or (words[0] in _GREETINGS and len(words) > 1)
        ):
            offset = group.index(words[1]) if len(words) > 1 else len(group)
            words = words[1:]
        while words and words[-1] in _EN_NOT_SURNAMES:
            words.pop()
        if not words:
            continue
        start = match.start() + offset
        before = text[max(0, start - 16) : start]
        # Two or more words, the first a common first name or right after a cue word
        # ("customer: …"); or a title, which vouches even for one word ("Mr. Smith").
        usable = words[0] not in _EN_NOT_SURNAMES and words[0] not in _TITLES
        named = (
            usable and len(words) > 1 and (words[0] in _FIRST_NAMES or _after_cue(before.lower()))
        )
        if not named and not (usable and _after_title(before)):
            # Capitalised words before a name are not part of it ("The MacBook John Smith
            # returned", "Partner John Smith"): it starts at a common first name.
            later = _first_name_within(words)
            if later is None:
                continue
            start = match.start() + _word_at(group, words[later], start - match.start())
            words = words[later:]
        end = match.start() + group.rfind(words[-1]) + len(words[-1])
        yield Finding(start, end, "PERSON", 0.8)


def _first_name_within(words: list[str]) -> int | None:
    """Where a name ends ``words`` after other capitalised words: the index of the first
    common first name after ``words[0]`` that only first names and one surname follow
    ("The MacBook Mary Ann Smith"; not "San Jose Medical Center", "Your Bill Is Ready")."""
    for index in range(1, len(words) - 1):
        if words[index] in _FIRST_NAMES and all(
            word in _FIRST_NAMES for word in words[index + 1 : -1]
        ):
            return index
    return None


def _word_at(group: str, word: str, after: int) -> int:
    """Where ``word`` stands as a whole word in ``group`` (words split by single spaces),
    after offset ``after``."""
    at = group.find(" " + word, after)
    while at >= 0 and group[at + 1 + len(word) : at + 2 + len(word)] not in ("", " "):
        at = group.find(" " + word, at + 1)
    return at + 1


def _after_title(before: str) -> bool:
    """Whether ``before`` ends in a title and whitespace (``Mr. ``, ``Dr ``)."""
    title = before.rstrip()
    return len(title) < len(before) and _ends_in_word(title.removesuffix("."), _TITLE_WORDS)


def _after_cue(before: str) -> bool:
    """Whether ``before`` (lower-cased) ends in a cue word and a separator (``customer: ``)."""
    cue = before.rstrip(_WHITESPACE_CHARS + ":,-")
    return len(cue) < len(before) and _ends_in_word(cue, _EN_CUE_WORDS)


def _ends_in_word(text: str, words: tuple[str, ...]) -> bool:
    """Whether ``text`` ends in one of ``words``, and not in the middle of a longer word."""
    # Mostly it ends in none, and one endswith in C says so: the loop alone made 81
    # endswith calls on the 1.5 KB prompt (_english_people: 301,000 -> 238,000
    # instructions, callgrind).
    if not text.endswith(words):
        return False
    for word in words:
        if text.endswith(word):
            previous = text[-len(word) - 1 : -len(word)]
            if not (previous.isalnum() or previous == "_"):
                return True
    return False


def _english_addresses(text: str) -> Iterator[Finding]:
    for match in _EN_ADDRESS.finditer(text):
        yield Finding(match.start(), match.end(), "CN_ADDRESS", 0.85)
